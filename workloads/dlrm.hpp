// The DLRM workload (Naumov et al. 2019; facebookresearch/dlrm dlrm_s_pytorch.py): dense features
// through a bottom MLP (Linear + ReLU per layer, the last one too), K embedding bags with sum
// pooling over L lookups each, the pairwise dot interaction of the bottom output and the K bags
// (dim + K(K+1)/2 values), and a top MLP. The top MLP ends in two logits trained with softmax
// cross-entropy, which is binary cross-entropy on their difference: DLRM's sigmoid output with
// one more row in the last layer, so that every mode's loss and accuracy code serves it unchanged.
// Parameters in DLRM's registration order: emb_l.0.weight ... emb_l.{K-1}.weight ([rows, dim]
// each), bot_l.{0,2,...}.weight/bias, top_l.{0,2,...}.weight/bias (nn.Sequential indices). The
// embedding gradient is dense (nn.EmbeddingBag(sparse=False)): every row of every table, zero
// where the batch touched none.
// Input rows: workloads/dlrm_kernels.hpp's BagShape (dense floats, then the indices as floats).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "workloads/dlrm_kernels.hpp"
#include "workloads/mlp.hpp"
#include "workloads/model.hpp"

namespace dpbench {

// DLRM's sizes (--dense-features, --tables, --rows, --embedding-dim, --lookups, --bottom-mlp,
// --top-mlp). The defaults keep 4 replicas of the dense-gradient model within a few hundred MiB:
// 8 tables x 100,000 rows x 16 (12.8 M embedding parameters, 51 MB of fp32).
struct DlrmShape {
  std::size_t dense_features = 13;  // Criteo's 13 integer features
  std::size_t tables = 8;
  std::size_t rows = 100000;               // per table
  std::size_t dim = 16;                    // the embedding dimension, also the bottom MLP's output width
  std::size_t lookups = 20;                // indices per table per sample (the pooling factor)
  std::vector<std::size_t> bottom = {64};  // the bottom MLP's hidden widths (then dim)
  std::vector<std::size_t> top = {64};     // the top MLP's hidden widths (then 2 logits)
  // nn.EmbeddingBag(sparse=True) (--sparse-grad): the tables' gradients are the touched rows
  // only; sharded_ps pushes and pulls those rows, allreduce all-gathers them; SGD without momentum.
  bool sparse_grad = false;
  // --embedding-optimizer: how the tables step under sparse_grad, "sgd" (torch.optim.SGD without
  // momentum) or "adagrad" (torch.optim.Adagrad on a sparse gradient); the dense layers take the
  // run's optimizer.
  std::string embedding_optimizer = "sgd";
  // The click logs' index law the run trains on (--zipf-alpha; 0: uniform), recorded with the
  // workload so that runs under different laws are different experiments (the data reads
  // ClickLogOptions, which the command line fills from the same option).
  double zipf_alpha = 0;

  cpu::BagShape bags() const { return {dense_features, tables, rows, dim, lookups}; }
  std::size_t input_features() const { return dense_features + tables * lookups; }
  std::size_t interaction_width() const { return dim + tables * (tables + 1) / 2; }
  std::size_t embedding_params() const { return tables * rows * dim; }
};

// The largest table: its row indices travel as floats, exact up to 2^24.
inline constexpr std::size_t kDlrmMaxRows = std::size_t{1} << 24;

// Throws InputError with one line naming the option when a size is zero, a width is zero, rows
// exceed kDlrmMaxRows, or the embedding parameters overflow.
void check_dlrm_shape(const DlrmShape& shape);

// Rows [row_begin, row_end) of table `table` as Dlrm::init_params makes them for `shape` and
// `seed`: (row_end - row_begin) x shape.dim values into out.
template <typename T>
void init_table_rows(const DlrmShape& shape, std::uint64_t seed, std::size_t table, std::size_t row_begin,
                     std::size_t row_end, T* out);

template <typename T>
class Dlrm final : public ModelT<T> {
 public:
  // Throws InputError as check_dlrm_shape.
  explicit Dlrm(DlrmShape shape);
  std::string name() const override { return "dlrm"; }
  const std::vector<ParamView>& params() const override { return views_; }
  std::size_t num_params() const override { return num_params_; }
  std::size_t input_features() const override { return shape_.input_features(); }
  std::size_t num_classes() const override { return 2; }
  const DlrmShape& shape() const { return shape_; }

  using ModelT<T>::reserve;
  void reserve(std::size_t max_batch, std::shared_ptr<ModelOps<T>> ops) override;
  // The two MLPs' activations, and per sample: the dense inputs, the bottom output and its
  // gradient, the bags and their gradient, the interaction and its gradient.
  std::size_t activation_bytes(std::size_t max_batch) const override;
  // Tables U(-sqrt(1/rows), sqrt(1/rows)) (DLRM's create_emb), each row from its own counter-based
  // stream (init_table_rows), so a server of some rows makes them alone; the MLPs nn.Linear's
  // default from seeds that do not depend on the tables' size.
  void init_params(T* params, std::uint64_t seed) const override;
  void forward(const T* params, const T* x, std::size_t batch, T* logits) override;
  // Ready order: the top MLP's layers last to first, the bottom MLP's likewise, then the tables
  // last to first (reverse parameter order).
  void backward(const T* params, const T* x, const T* dlogits, std::size_t batch, T* grads,
                const std::function<void(std::size_t)>& on_grad_ready) override;

 private:
  DlrmShape shape_;
  Mlp<T> bottom_, top_;
  std::vector<ParamView> views_;
  std::size_t num_params_ = 0, bottom_offset_ = 0, top_offset_ = 0;
  std::size_t max_batch_ = 0;
  std::shared_ptr<ModelOps<T>> ops_;
  ModelBuffer<T> dense_, z_, dz_, bags_, dbags_, r_, dr_;
};

}  // namespace dpbench
