// The emulated cluster's launchers (internal to cluster/), one file each: how the inner stage
// (run_inner, cluster/cluster_job.cpp) starts the job's processes in the nodes once the cluster is
// built, probed and watched by the heartbeat, and what each needs installed. Every run_*_job
// waits for its job through wait_for_job (cluster/job_common.hpp) and returns the job's exit code:
// 0, the first failing process's code, 1 when `lost_node` became a node's index (the heartbeat's:
// it stopped answering), 128 + signal when interrupted.
// Not for: the pieces the launchers share (cluster/job_common.hpp) or the stages themselves.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/link.hpp"
#include "cluster/netns.hpp"

namespace dpbench::cluster {

// --launcher env, tcp, file (launcher_direct.cpp): each rank a process in its node, given
// torchrun's variables (env) or PyTorch's explicit --init-method and --rank (tcp, file).
int run_direct_job(const ClusterSpec& spec, const Cluster& c, const std::vector<std::string>& args,
                   const std::atomic<int>& lost_node);

// --launcher tcp's and file's --init-method: rank 0's address on node 0 and the rendezvous port,
// or a file in the cluster's private /run (a tmpfs every node sees, gone with the cluster) named
// after this job's process.
std::string explicit_init_method(const ClusterSpec& spec, const Cluster& c);

// --launcher torchrun (launcher_torchrun.cpp): throws InputError (exit 2) with one line when
// torchrun, or for --rdzv-backend etcd etcd or torchrun's Python module etcd, is missing.
void check_torchrun_tools(const ClusterSpec& spec);

// Starts the job the torchrun way: etcd on node 0 for --rdzv-backend etcd, then one torchrun agent
// per node, and waits for them (restarting a killed node's agent up to --max-restarts times).
int run_torchrun_job(const ClusterSpec& spec, const Cluster& c, const std::vector<std::string>& args,
                     const std::atomic<int>& lost_node);

// --launcher mpirun (launcher_mpirun.cpp): throws InputError (exit 2) with one line when mpirun or
// unshare is missing.
void check_mpirun_tools();

// Whether mpirun's ranks yield their core while they wait (Open MPI's mpi_yield_when_idle): the
// user's OMPI_MCA_mpi_yield_when_idle when set, else when the cluster's ranks outnumber the host's
// cores. Open MPI polls its TCP connections in a busy loop while a rank waits, and sets that
// parameter itself when a host's slots are oversubscribed; the emulated nodes' slots are not, but
// all of them share this host's cores, where a waiting rank's loop takes the core another node's
// rank needs to compute or to send.
bool mpi_yields_when_idle(const ClusterSpec& spec);

// The collective algorithms mpirun's job runs, for the cluster's description: collective name ->
// Open MPI's algorithm, or "VARIABLE=value (the user's)" where the user set its variable.
nlohmann::json mpi_collectives_description();

// Starts the job with Open MPI's mpirun on the switch: its daemons go into the nodes through
// mpi_rsh_agent, K slots per node (ranks node-major, as the env launcher places them), TCP on
// the cluster's subnet only. Waits for it.
int run_mpirun_job(const ClusterSpec& spec, const Cluster& c, const std::vector<std::string>& args,
                   const std::atomic<int>& lost_node);

// --launcher srun (launcher_slurm.cpp): throws InputError (exit 2) with one line naming the first
// of srun, sinfo, slurmctld, slurmd, munged that is missing.
void check_srun_tools();

// Starts the job with Slurm: the daemons (SlurmDaemons), then `srun -N nodes -n world` from node 0,
// each task in its node with Slurm's variables (launch/resolve.hpp reads them: no torchrun variables,
// no wrapper). Waits for srun; the daemons stop when it is done.
int run_srun_job(const ClusterSpec& spec, const Cluster& c, const std::vector<std::string>& args,
                 const std::atomic<int>& lost_node);

}  // namespace dpbench::cluster
