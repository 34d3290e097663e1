#!/usr/bin/env bash
# Installs dpbench's build and run dependencies from Debian packages. Idempotent: packages that
# are already installed are skipped, and apt is not touched at all when nothing is missing.
# Used by the README quick start and by .ci/run. OpenMPI and gloo are installed for the `mpi` and
# `gloo` backends and SimGrid for the simulator (the build still works without them); CUDA and
# NCCL stay optional.
#   --test   also what only the tests need (Chromium, to render the HTML report headless;
#            python3-torch, for the PyTorch reference and its loss-agreement test, and torchrun;
#            python3-torchvision, for models/describe.py resnet50 and vit_b_16;
#            etcd-server and python3-etcd, for torchrun's etcd rendezvous on an emulated cluster;
#            slurmctld, slurmd, slurm-client and munge, for --launcher srun on an emulated cluster:
#            their services need /etc/slurm/slurm.conf and do not start without one, dpbench runs
#            its own daemons inside the cluster's namespaces; clang-format, for the style check,
#            scripts/format.sh --check)
#   --fuzz   also clang-14 and its libFuzzer runtime (scripts/fuzz.sh)
#   --ci     also ccache, which .ci/run puts in front of the compilers
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libfmt-dev libcli11-dev libopenblas-dev zlib1g-dev
  libzmq3-dev cppzmq-dev libsqlite3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libbenchmark-tools
  libopenmpi-dev openmpi-bin libgloo-dev
  libsimgrid-dev
  dataset-fashion-mnist
  python3-matplotlib python3-scipy python3-jsonschema python3-jinja2
)
case " $* " in *" --test "*) packages+=(chromium python3-torch python3-torchvision etcd-server python3-etcd slurmctld slurmd slurm-client munge clang-format) ;; esac
case " $* " in *" --fuzz "*) packages+=(clang-14 libclang-rt-14-dev) ;; esac
case " $* " in *" --ci "*) packages+=(ccache) ;; esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
