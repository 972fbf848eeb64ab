"""Data-parallel training with a pluggable gradient compressor (pimrt.gradsa registry).

    torchrun --nproc-per-node 2 -m pimrt.train --model resnet18 --dataset digits \
        --compressor gradsa --epochs 10 --out results/run
    python -m pimrt.train --model tinycnn --epochs 1      # one process, world size 1

Writes OUT/metrics.csv (per step), OUT/summary.json (rank 0) and OUT/checkpoint-rank{r}.pt
every epoch; --resume continues from them. Modules: cli (options), data, models, distenv
(process group, timeout, watchdog), checkpoint, managers (step wrappers), loop (the loop).
"""
