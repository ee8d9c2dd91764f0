#!/usr/bin/env bash
# Installs the Debian 12 packages moesim needs to build, test and run its notebooks, if any is missing.
set -euo pipefail
packages=(cmake ninja-build g++ libboost-graph-dev libeigen3-dev nlohmann-json3-dev libcli11-dev catch2
          libmetis-dev libbenchmark-dev jupyter-nbconvert python3-nbclient python3-ipykernel
          python3-matplotlib python3-pandas clang-format libopenmpi-dev openmpi-bin)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "moesim setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
