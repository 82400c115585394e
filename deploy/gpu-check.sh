#!/bin/sh
# deploy/gpu-check.sh: check GPU pools on a machine with NVIDIA GPUs.
#
# Runs TestRealGPU (cmd/codexec/gpu_real_test.go) through an MCP client
# against a worker that finds this machine's GPUs itself: a job asking for
# one GPU sees exactly one, a PyTorch matrix multiply on it, its peak
# memory as nvidia-smi reports it, two jobs at once on two devices (or one
# after the other on a one-GPU machine). Prints what was verified.
#
# Needs: the NVIDIA driver and nvidia-smi; Go; bubblewrap; redis-server on
# PATH; bin/nats-server (make deps); and a virtual environment with a CUDA
# build of PyTorch: CODEXEC_GPU_CHECK_VENV, or one made here (pip install
# torch, which needs the network). Run as root for the sandbox's uids.
set -eu
cd "$(dirname "$0")/.."
nvidia-smi -L
nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id --format=csv,noheader,nounits
venv=${CODEXEC_GPU_CHECK_VENV:-${TMPDIR:-/tmp}/codexec-gpu-venv}
if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
	python3 -m venv "$venv"
	"$venv/bin/pip" install --quiet torch
fi
"$venv/bin/python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())'
CODEXEC_REAL_GPU=1 CODEXEC_GPU_CHECK_VENV="$venv" exec go test -count=1 -v -timeout 15m -run 'TestRealGPU' ./cmd/codexec
