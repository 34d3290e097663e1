#include "train/checkpoint.hpp"

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>

#include <fmt/format.h>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "train/rank_context.hpp"

namespace dpbench {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'D', 'P', 'B', 'C', 'K', 'P', 'T', '\n'};
constexpr const char* kFormat = "dpbench-checkpoint";
constexpr int kVersion = 1;

std::uint32_t crc32_of(const char* data, std::size_t size) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  while (size > 0) {
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(size, 1u << 30));
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(data), chunk);
    data += chunk;
    size -= chunk;
  }
  return static_cast<std::uint32_t>(crc);
}

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint64_t get_le(const std::string& in, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

// Blobs of the payload, in this order.
template <typename T>
void append_blob(nlohmann::json& blobs, std::string& payload, const char* name, const char* dtype,
                 const std::vector<T>& v) {
  blobs.push_back({{"name", name}, {"dtype", dtype}, {"offset", payload.size()}, {"count", v.size()}});
  payload.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
template <typename T>
std::vector<T> read_blob(const nlohmann::json& header, const std::string& bytes, std::size_t payload_at,
                         std::size_t payload_bytes, const char* name, const char* dtype) {
  for (const auto& b : header.at("blobs")) {
    if (b.at("name") != name) continue;
    if (b.at("dtype") != dtype)
      throw Error(fmt::format("blob {}: dtype {}, expected {}", name, b.at("dtype").dump(), dtype));
    const std::size_t offset = b.at("offset"), count = b.at("count");
    if (count > payload_bytes / sizeof(T) || offset > payload_bytes - count * sizeof(T)) {
      throw Error(fmt::format("blob {} lies outside the payload", name));
    }
    std::vector<T> v(count);
    if (count > 0) std::memcpy(v.data(), bytes.data() + payload_at + offset, count * sizeof(T));
    return v;
  }
  throw Error(fmt::format("no blob {}", name));
}

std::string read_whole_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot be read");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Steps of the checkpoint files in dir, newest first, with the ranks that wrote each.
std::map<long, std::vector<int>, std::greater<>> list_checkpoints(const std::string& dir) {
  static const std::regex name(R"(ckpt-(\d{9})-rank(\d+)\.dpbc)");
  std::map<long, std::vector<int>, std::greater<>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, name)) found[std::stol(m[1])].push_back(std::stoi(m[2]));
  }
  return found;
}

// Packs doubles bit for bit into floats (two each) so that a float collective can move them.
std::vector<float> as_floats(const std::vector<double>& v) {
  std::vector<float> out(v.size() * 2);
  if (!v.empty()) std::memcpy(out.data(), v.data(), v.size() * sizeof(double));
  return out;
}

// An intact checkpoint of another run is the user's mistake, not damage: InputError naming the
// first field that differs.
void check_fingerprint(const nlohmann::json& theirs, const nlohmann::json& ours, const std::string& path) {
  for (const auto& [field, value] : ours.items()) {
    const nlohmann::json other = theirs.contains(field) ? theirs.at(field) : nlohmann::json();
    if (other != value) {
      throw InputError(fmt::format("--resume: {} was written by a run with {} {}, this run has {}", path, field,
                                   other.dump(), value.dump()));
    }
  }
}

}  // namespace

nlohmann::json checkpoint_fingerprint(const TrainConfig& config, std::size_t num_params, long steps_per_epoch) {
  nlohmann::json f = {{"workload", config.model.workload},
                      {"hidden", config.model.hidden},
                      {"channels", config.model.channels},
                      {"num_params", num_params},
                      {"world_size", config.world_size},
                      {"mode", config.mode},
                      {"transport", config.transport},
                      {"servers", config.sharded_ps.servers},
                      {"global_batch", config.global_batch},
                      {"rank_batches", config.rank_batches},
                      {"seed", config.seed},
                      {"steps_per_epoch", steps_per_epoch}};
  // SGD's files name no optimizer (as before there were others), so they still resume; an Adam
  // state cannot resume an SGD run or the other way round.
  if (config.optimizer.name != "sgd") f["optimizer"] = config.optimizer.name;
  return f;
}

std::string checkpoint_path(const std::string& dir, long step, int rank) {
  return (fs::path(dir) / fmt::format("ckpt-{:09d}-rank{}.dpbc", step, rank)).string();
}

std::string encode_checkpoint(const CheckpointFile& f) {
  nlohmann::json blobs = nlohmann::json::array();
  std::string payload;
  append_blob(blobs, payload, "params", "f32", f.params);
  append_blob(blobs, payload, "buffers", "f32", f.buffers);
  append_blob(blobs, payload, "velocity", "f32", f.velocity);
  append_blob(blobs, payload, "step_losses", "f64", f.step_losses);
  const nlohmann::json header = {{"format", kFormat},
                                 {"version", kVersion},
                                 {"fingerprint", f.fingerprint},
                                 {"step", f.step},
                                 {"rank", f.rank},
                                 {"writers", f.writers},
                                 {"velocity_offset", f.velocity_offset},
                                 {"optimizer_slots", f.optimizer_slots},
                                 {"blobs", blobs},
                                 {"payload_bytes", payload.size()}};
  const std::string text = header.dump();
  std::string out(kMagic, sizeof(kMagic));
  put_le(out, text.size(), 8);
  out += text;
  out += payload;
  put_le(out, crc32_of(out.data(), out.size()), 4);
  return out;
}

CheckpointFile decode_checkpoint(const std::string& bytes) {
  constexpr std::size_t kFixed = sizeof(kMagic) + 8;
  if (bytes.size() < kFixed + 4 || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    throw Error(bytes.size() < kFixed + 4 ? fmt::format("truncated ({} bytes)", bytes.size())
                                          : std::string("not a dpbench checkpoint"));
  }
  const std::uint64_t header_len = get_le(bytes, sizeof(kMagic), 8);
  if (header_len > bytes.size() - kFixed - 4) throw Error(fmt::format("truncated ({} bytes)", bytes.size()));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + kFixed,
                                   bytes.begin() + static_cast<std::ptrdiff_t>(kFixed + header_len));
  } catch (const nlohmann::json::exception&) {
    throw Error("malformed header");
  }
  try {
    if (header.at("format") != kFormat) throw Error("not a dpbench checkpoint");
    if (header.at("version") != kVersion)
      throw Error(fmt::format("version {} (this dpbench reads {})", header.at("version").dump(), kVersion));
    const std::size_t payload_bytes = header.at("payload_bytes");
    const std::size_t expected = kFixed + header_len + payload_bytes + 4;
    if (bytes.size() != expected) {
      throw Error(fmt::format("{} ({} bytes, the header says {})", bytes.size() < expected ? "truncated" : "wrong size",
                              bytes.size(), expected));
    }
    const auto stored = static_cast<std::uint32_t>(get_le(bytes, bytes.size() - 4, 4));
    const std::uint32_t actual = crc32_of(bytes.data(), bytes.size() - 4);
    if (stored != actual) throw Error(fmt::format("checksum mismatch (CRC-32 {:08x}, stored {:08x})", actual, stored));
    const std::size_t at = kFixed + header_len;
    CheckpointFile f;
    f.fingerprint = header.at("fingerprint");
    f.step = header.at("step");
    f.rank = header.at("rank");
    f.writers = header.at("writers");
    f.velocity_offset = header.at("velocity_offset");
    f.optimizer_slots = header.value("optimizer_slots", 1);
    if (f.optimizer_slots < 1) throw Error(fmt::format("optimizer_slots {}: must be at least 1", f.optimizer_slots));
    f.params = read_blob<float>(header, bytes, at, payload_bytes, "params", "f32");
    f.buffers = read_blob<float>(header, bytes, at, payload_bytes, "buffers", "f32");
    f.velocity = read_blob<float>(header, bytes, at, payload_bytes, "velocity", "f32");
    if (f.velocity.size() % static_cast<std::size_t>(f.optimizer_slots) != 0) {
      throw Error(fmt::format("velocity: {} floats for {} optimizer slots", f.velocity.size(), f.optimizer_slots));
    }
    f.step_losses = read_blob<double>(header, bytes, at, payload_bytes, "step_losses", "f64");
    return f;
  } catch (const nlohmann::json::exception&) {
    throw Error("malformed header");
  }
}

Checkpointer::Checkpointer(const TrainConfig& config, RankContext& ctx, std::size_t num_params, long steps_per_epoch,
                           int writers)
    : config_(config), ctx_(ctx), num_params_(num_params), spe_(steps_per_epoch), writers_(writers) {}

long Checkpointer::restore(float* params, float* buffers, std::size_t num_buffers, const OptimizerShard& optimizer) {
  if (config_.checkpoint.dir.empty() || !config_.checkpoint.resume) return 0;
  const std::string& dir = config_.checkpoint.dir;
  const int rank = ctx_.rank();
  const auto found = list_checkpoints(dir);
  if (found.empty()) return 0;  // nothing to resume: a fresh start
  const nlohmann::json ours = checkpoint_fingerprint(config_, num_params_, spe_);
  for (const auto& [step, writer_ranks] : found) {
    // Every writer's file of this checkpoint must be intact; then the files this rank needs.
    std::vector<CheckpointFile> files;
    std::string problem;
    for (int r = 0; r < writers_ && problem.empty(); ++r) {
      const std::string path = checkpoint_path(dir, step, r);
      try {
        if (!fs::exists(path)) throw Error("missing");
        files.push_back(decode_checkpoint(read_whole_file(path)));
        if (files.back().step != step || files.back().rank != r) throw Error("its header names another step or rank");
        if (r == 0) check_fingerprint(files.front().fingerprint, ours, path);
      } catch (const InputError&) {
        throw;
      } catch (const Error& e) {
        problem = fmt::format("{}: {}", path, e.what());
      }
    }
    if (!problem.empty()) {
      if (rank == 0)
        fmt::print(stderr, "dpbench: warning: --resume: skipping the checkpoint of step {}: {}\n", step, problem);
      continue;
    }
    const CheckpointFile& head = files.front();
    const auto world = static_cast<std::size_t>(config_.world_size);
    if (head.step_losses.size() != world * static_cast<std::size_t>(step) || head.params.size() != num_params_ ||
        head.buffers.size() != num_buffers) {
      throw InputError(fmt::format("--resume: {} holds {} parameters and {} buffers, this run has {} and {}",
                                   checkpoint_path(dir, step, 0), head.params.size(), head.buffers.size(), num_params_,
                                   num_buffers));
    }
    // Load: rank 0's parameters and buffers, this rank's losses, its optimizer range.
    if (rank == 0) {
      if (params != nullptr) ctx_.upload(params, head.params.data(), num_params_);
      if (buffers != nullptr && num_buffers > 0) ctx_.upload(buffers, head.buffers.data(), num_buffers);
    }
    const auto first = head.step_losses.begin() +
                       static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rank) * static_cast<std::size_t>(step));
    resumed_losses_.assign(first, first + step);
    if (optimizer.count > 0)
      restore_optimizer(rank < writers_ ? files[static_cast<std::size_t>(rank)] : head, optimizer);
    ctx_.synchronize();
    resumed_ = step;
    return step;
  }
  throw InputError(fmt::format(
      "--resume: no valid checkpoint in {} ({} found, every one incomplete, truncated or corrupt)", dir, found.size()));
}

void Checkpointer::restore_optimizer(const CheckpointFile& own, const OptimizerShard& optimizer) {
  const std::string path = checkpoint_path(config_.checkpoint.dir, own.step, own.rank);
  if (own.optimizer_slots != optimizer.slots) {
    throw InputError(fmt::format("--resume: {} holds {} optimizer state arrays per parameter, --optimizer {} keeps {}",
                                 path, own.optimizer_slots, config_.optimizer.name, optimizer.slots));
  }
  const std::size_t own_count = own.velocity.size() / static_cast<std::size_t>(own.optimizer_slots);
  if (optimizer.offset < own.velocity_offset || optimizer.offset + optimizer.count > own.velocity_offset + own_count) {
    throw InputError(fmt::format("--resume: {} does not hold the optimizer state of parameters [{}, {})", path,
                                 optimizer.offset, optimizer.offset + optimizer.count));
  }
  for (int s = 0; s < optimizer.slots; ++s) {
    const float* from = own.velocity.data() + static_cast<std::size_t>(s) * own_count +
                        (optimizer.offset - own.velocity_offset);
    ctx_.upload(optimizer.state + static_cast<std::size_t>(s) * optimizer.count, from, optimizer.count);
  }
}

void Checkpointer::merge_losses(std::vector<double>& local_step_sums) const {
  for (std::size_t s = 0; s < resumed_losses_.size() && s < local_step_sums.size(); ++s) {
    local_step_sums[s] = resumed_losses_[s];
  }
}

namespace {
// Writes this rank's checkpoint of steps_done into dir (atomically); then this rank's files of
// later steps, which belong to a run that went further and was not resumed from them, go, and of
// the rest the newest kKeepCheckpoints stay. Throws IoError naming the file.
void write_and_prune(const std::string& dir, long steps_done, int rank, const std::string& bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string path = checkpoint_path(dir, steps_done, rank);
  write_file_atomic(path, bytes.data(), bytes.size(), fmt::format("--checkpoint-dir {}", path));
  int kept = 0;
  for (const auto& [step, ranks] : list_checkpoints(dir)) {
    if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) continue;
    if (step > steps_done || ++kept > kKeepCheckpoints) fs::remove(checkpoint_path(dir, step, rank), ec);
  }
}
}  // namespace

void Checkpointer::maybe_save(long steps_done, const float* params, const float* buffers, std::size_t num_buffers,
                              const OptimizerShard& optimizer, RankResult& me, CommStats& timed_start) {
  if (config_.checkpoint.dir.empty() || config_.checkpoint.every <= 0 || steps_done % config_.checkpoint.every != 0 ||
      steps_done <= resumed_) {
    return;
  }
  Communicator& comm = ctx_.comm();
  const int rank = ctx_.rank();
  const CommStats before = comm.stats();
  // Every rank has finished step steps_done - 1 (as the seeds' dist.barrier() before rank 0 saves).
  ctx_.synchronize();
  comm.barrier();
  const auto t0 = std::chrono::steady_clock::now();

  // Every rank's loss sums so far, gathered bit for bit to rank 0.
  std::vector<double> losses = ctx_.step_losses(steps_done);
  merge_losses(losses);
  const std::vector<float> packed = as_floats(losses);
  const auto world = static_cast<std::size_t>(config_.world_size);
  Array<float> send(ctx_, MemoryCategory::comm_buffers, packed.size());
  Array<float> recv;
  if (rank == 0) recv = Array<float>(ctx_, MemoryCategory::comm_buffers, packed.size() * world);
  ctx_.upload(send.data(), packed.data(), packed.size());
  comm.gatherv(send.data(), std::vector<std::size_t>(world, packed.size()), recv.data(), 0);

  if (rank < writers_) {
    CheckpointFile f;
    f.fingerprint = checkpoint_fingerprint(config_, num_params_, spe_);
    f.step = steps_done;
    f.rank = rank;
    f.writers = writers_;
    f.velocity_offset = optimizer.offset;
    f.optimizer_slots = optimizer.slots;
    f.velocity.resize(optimizer.count * static_cast<std::size_t>(optimizer.slots));
    ctx_.synchronize();
    if (optimizer.count > 0) ctx_.download(f.velocity.data(), optimizer.state, f.velocity.size());
    if (rank == 0) {
      f.params.resize(num_params_);
      f.buffers.resize(num_buffers);
      ctx_.download(f.params.data(), params, num_params_);
      if (num_buffers > 0) ctx_.download(f.buffers.data(), buffers, num_buffers);
      std::vector<float> all(packed.size() * world);
      ctx_.download(all.data(), recv.data(), all.size());
      f.step_losses.resize(losses.size() * world);
      if (!all.empty()) std::memcpy(f.step_losses.data(), all.data(), all.size() * sizeof(float));
    }
    const std::string bytes = encode_checkpoint(f);
    write_and_prune(config_.checkpoint.dir, steps_done, rank, bytes);
    me.checkpoint_bytes = static_cast<std::int64_t>(bytes.size());
  }
  me.checkpoint_write_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  const CommStats after = comm.stats();
  timed_start.bytes_sent += after.bytes_sent - before.bytes_sent;
  timed_start.bytes_received += after.bytes_received - before.bytes_received;
}

}  // namespace dpbench
