"""PyTorch reference for dpbench: the same model, optimizer and global batch trained with PyTorch
in the data-parallel styles dpbench implements, timed the way dpbench times a run (warm-up steps
excluded, medians and percentiles of the per-step samples), written as one JSON file and printed
as a short table.

On CUDA: plain eager on one GPU, nn.DataParallel over the visible GPUs (dpbench's `ps`) and
DistributedDataParallel with one process per GPU over NCCL (dpbench's `allreduce`). On the CPU:
plain eager in one process, DistributedDataParallel over gloo, DataParallel's data flow written
with gloo collectives (rank 0 broadcasts, scatters, gathers, reduces and steps), and the batch-
updating parameter server of PyTorch's RPC tutorial (`rpc_ps`), each with N processes.
With --start DIR it reads a start bundle written by dpbench (model, initial parameters and
buffers, training and test data, the sample order, the optimizer) so dpbench and PyTorch train the
same parameters on the same samples in the same order, and the per-step losses can be compared.

It is the yardstick for "dpbench no slower than PyTorch eager", not a part of dpbench, and not a
general training script: no checkpoints, no mixed precision. The command is
bench/reference/pytorch_reference.py (cli.main); bench/reference/README.md documents it.

Modules, in the order a run uses them:
- common: PyTorch (None when it cannot be imported), constants, InputError;
- options: the command line's options (dpbench's spellings: --max-steps, --ranks);
- bundle: the start bundle's reader and checks;
- model: the MLP and the CNN, the initial parameters, the optimizer;
- data: Fashion-MNIST, the synthetic set, the sample order, one process's model and data;
- config: the run configuration and each program's plan (processes, threads, or why it is
  skipped);
- runtime: threads (torch and OpenBLAS), tf32, peak RSS;
- training: the training step, the timed loop, the evaluation;
- programs: CUDA plain and nn.DataParallel, and the spawned plain and DDP ranks;
- dataparallel: DataParallel's flow over gloo (CPU);
- rpc_ps: the RPC parameter server (CPU);
- spawn: running a program in spawned processes;
- results, env: the run record, the environment, the JSON file and the table;
- cli: main.
"""
