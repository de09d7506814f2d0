#!/usr/bin/env bash
# Installs baton's build and test dependencies from Debian's archive.
# Idempotent: packages already present are not reinstalled, and apt is only
# consulted when something is missing.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libyaml-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev zlib1g-dev
  libopenmpi-dev openmpi-bin libeigen3-dev libtbb-dev libopenblas-pthread-dev
  dataset-fashion-mnist
  fortunes                      # text corpus (data.dataset: fortunes, tests/data/text_test)
  python3-torch python3-numpy   # the GPT reference test (tests/reference/gpt_reference.py)
  iproute2                      # tests/mpi/multihost_test: network namespaces and veth links
  clang libclang-rt-14-dev llvm   # scripts/fuzz.sh: libFuzzer, sanitizer runtimes, llvm-symbolizer
  slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge   # tests/slurm: a real Slurm, srun with PMIx
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
