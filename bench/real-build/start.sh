#!/usr/bin/env bash
# Device call 1: set up, start the vLLM build detached (it keeps running between calls
# while the machine stays warm), then watch it until this call's time is nearly up.
#   bash .devrun/start.sh TARGETS SECONDS
set -u
D=$PWD/.devrun S=/root/rb TARGETS=$1
mkdir -p $S
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site $D/whl/*.whl $D/sparkbuild-*.whl || exit 1
export PYTHONPATH=/tmp/site
{ echo "== machine"; date -u; echo "cores $(nproc)"; grep -E 'MemTotal|MemAvailable' /proc/meminfo
  df -h /root | tail -1; uname -r
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch,sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), sys.executable)'
  nvcc --version | tail -2; cmake --version | head -1; echo "ninja $(ninja --version)"
  echo "launchers: $(command -v ccache sccache)"
  python3 -m pip list 2>/dev/null | grep -i -E '^(setuptools|packaging|jinja2|regex|wheel|build|protobuf|cmake|ninja|pytest|pytest-timeout|transformers|pydantic) '
} 2>&1 | tee $S/machine.txt
JOBS=$(python3 -c '
import os, sys
from sparkbuild.jobplan.machine import plan_build
gib = 1024**3  # KINDS.md: 256 GiB; /proc/meminfo starts low on this machine and grows
plan = plan_build(total_memory_bytes=256*gib, available_memory_bytes=256*gib,
                  cores=os.cpu_count(), job_memory_gib=7.5, arch_count=2)
print("\n".join("doctor: " + r for r in plan.reasons), file=sys.stderr)
print(plan.max_jobs)' 2>> $S/machine.txt)
echo "MAX_JOBS=$JOBS targets=$TARGETS" | tee -a $S/machine.txt
source $D/cudaroot.sh | tee -a $S/machine.txt; source $D/cudaroot.sh > /dev/null
date +%s > $S/start
setsid nohup python3 $D/monitor.py $S/mem.json $S/wheel.rc > /dev/null 2>&1 < /dev/null &
setsid nohup bash -c "python3 -m sparkbuild wheel --offline --bundle $D/vllm-0.20.0.bundle.tar.xz \
  --use-existing-torch --jobs $JOBS --targets $TARGETS --no-closure --allow-unstartable --cache $S/cache \
  --out $S/wh --json > $S/wheel.json 2> $S/wheel.err; echo \$? > $S/wheel.rc" \
  > /dev/null 2>&1 < /dev/null &
bash $D/watch.sh $2
