"""The yardstick (pimrt.memory_meter): live storages counted once, pre-existing ones not at
all, host copies made in pack hooks (save_on_cpu's, Layrub's pool) apart from device memory."""
import torch
from hypothesis import given, settings, strategies as hs

from pimrt.memory_meter import MemoryMeter


def test_new_storages_counted_once_views_and_in_place_not_at_all():
    p = torch.zeros(1000)                        # before the window: counts nowhere
    with MemoryMeter() as m:
        p.add_(1)
        p.view(10, 100).mul_(2)
        a = torch.ones(1000)                     # 4,000 B
        v = a[10:].view(-1, 10)                  # a view: the same storage
        b = a * 2                                # 8,000 B live
        del a, v                                 # the view kept a alive until now
        c = torch.cat([b, b])                    # 4,000 + 8,000 = 12,000 B live
        del b, c
    assert (m.device_peak_bytes, m.host_peak_bytes) == (12_000, 0)


@settings(max_examples=40, deadline=None)
@given(hs.lists(hs.tuples(hs.booleans(), hs.integers(1, 5000)), max_size=30))
def test_peak_is_the_peak_of_live_bytes(script):
    live, expected, now = [], 0, 0
    with MemoryMeter() as m:
        for make, n in script:
            if make or not live:
                live.append(torch.empty(n, dtype=torch.uint8))
                now += n
                expected = max(expected, now)
            else:
                now -= live.pop(n % len(live)).numel()
        live.clear()
    assert m.device_peak_bytes == expected


def test_save_on_cpu_copies_are_host_memory():
    x = torch.randn(1000, requires_grad=True)
    with MemoryMeter() as m:
        with torch.autograd.graph.save_on_cpu(pin_memory=True):   # a real copy, also without CUDA
            y = x.exp()                          # exp saves its result: one 4,000 B copy
        y.sum().backward()
        del y
    assert m.host_peak_bytes == 4000
    assert m.device_peak_bytes >= 8000           # y and x.grad (made in the window)


def test_layrub_pool_counts_whole_as_host_and_masks_as_device():
    from pimrt.layrub import Layrub
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    lr = Layrub(model, input_shape=(4, 3, 32, 32), min_offload_bytes=1024)
    with MemoryMeter() as plain:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    with MemoryMeter() as m:
        with lr:
            torch.nn.functional.cross_entropy(model(x), y).backward()
    pool = sum(c.buf.untyped_storage().nbytes() for c in lr.pool.chunks)   # preallocated, held whole
    assert lr.stats.offloaded_bytes > 0 and m.host_peak_bytes == pool
    assert m.device_peak_bytes < plain.device_peak_bytes and plain.host_peak_bytes == 0


def test_declared_host_buffers_count_whole_once_used_never_as_device():
    from pimrt.memory_meter import host_buffer
    pool = host_buffer(lambda: torch.zeros(5000, dtype=torch.uint8))
    with MemoryMeter() as idle:
        torch.ones(100)
    assert (idle.device_peak_bytes, idle.host_peak_bytes) == (400, 0)     # not used: not counted
    with MemoryMeter() as used:
        pool[:100].copy_(torch.ones(100, dtype=torch.uint8))
    assert (used.device_peak_bytes, used.host_peak_bytes) == (100, 5000)
    with MemoryMeter() as made:
        other = host_buffer(lambda: torch.empty(3000, dtype=torch.uint8))
        del other
    assert (made.device_peak_bytes, made.host_peak_bytes) == (0, 3000)
