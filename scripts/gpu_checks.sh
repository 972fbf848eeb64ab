#!/usr/bin/env bash
# The checks that need a GPU, as one command for a machine with one (docs/architecture.md,
# "GPU checks"; not part of CI). It uses that machine's own python3 with PyTorch and CUDA and
# installs nothing; pimrt runs from the checkout (PYTHONPATH), and none of these checks needs
# the memctl extension.
#
#   bash scripts/gpu_checks.sh            # writes its logs and JSON to $OUT (default results/gpu)
#
# 1. the CUDA-only tests (Layrub's side stream and pinned pool, measured host kernel times);
# 2. the memory yardstick on CUDA (issue 27, pimrt.memory_meter): device memory from
#    torch.cuda.max_memory_allocated, host memory of the copies, and step time of plain torch,
#    save_on_cpu, checkpointing (per block, checkpoint_sequential) and Layrub, on the five
#    models of issue 5 (the table for docs/layrub.md);
# 3. GradSA on NCCL: one rank per GPU, so on one GPU one rank (NCCL refuses two ranks on one
#    device): the hook's CUDA path (compress on the device, padded all-gather, decode) end to end;
# 4. the host kernels of ResNet-18 (32x32) and ResNet-50 (224x224) at batch 32 timed on the GPU
#    (pimrt host-times), written to $OUT, to replay on the CPU machine with
#    `pimrt run --model resnet18 --batch 32 --input 32 --host-times $OUT/host_times_resnet18_b32_i32.json`.
#    ResNet-50's also in float16 and bfloat16 (--precision amp-fp16 / amp-bf16), as autocast runs them.
set -uo pipefail
OUT=${OUT:-results/gpu}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
status=0
step() { echo; echo "== $*"; }

step "environment"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")' | tee "$OUT/env.txt" \
    || status=1

step "CUDA tests"
timeout 240 python3 -m pytest -q -p no:cacheprovider \
    "tests/test_layrub_runtime.py::test_cuda_side_stream_bit_identical" \
    tests/test_host_model.py 2>&1 | tee "$OUT/tests.txt" || status=1

step "The memory yardstick on CUDA (issue 27): Layrub, save_on_cpu, checkpointing side by side"
timeout 300 python3 -m pimrt bench layrub --models resnet50,resnet101,resnet152,vgg16,densenet121 \
    --variants plain,save_on_cpu,checkpoint-block,checkpoint-seq,layrub-offload,layrub --steps 5 \
    --device cuda --json "$OUT/layrub_cuda.json" 2>&1 | tee "$OUT/layrub.txt" || status=1

step "GradSA on NCCL, one rank (issue 6)"
timeout 180 torchrun --standalone --nproc-per-node 1 -m pimrt.train --model tinycnn \
    --compressor gradsa --epochs 1 --device cuda --out "$OUT/gradsa_nccl" --force 2>&1 \
    | tail -25 | tee "$OUT/gradsa.txt" || status=1

step "Host kernel times on the GPU (issue 4), for pimrt run --host-times FILE on the CPU machine"
for spec in resnet18:32 resnet50:224; do
    m=${spec%:*}; i=${spec#*:}
    timeout 240 python3 -m pimrt host-times --model "$m" --batch 32 --input "$i" --quiet \
        --out "$OUT/host_times_${m}_b32_i${i}.json" 2>&1 | tee -a "$OUT/host_times.txt" || status=1
done
# the same kernels under mixed precision (float16 and bfloat16, as autocast runs them: issue 41),
# for pimrt run --precision amp-fp16|amp-bf16 --host-times FILE
for prec in amp-fp16 amp-bf16; do
    timeout 240 python3 -m pimrt host-times --model resnet50 --batch 32 --input 224 --quiet \
        --precision "$prec" --out "$OUT/host_times_resnet50_b32_i224_${prec}.json" 2>&1 \
        | tee -a "$OUT/host_times.txt" || status=1
done

echo; echo "gpu checks: $([ $status = 0 ] && echo ok || echo FAILED) (logs in $OUT)"
exit $status
