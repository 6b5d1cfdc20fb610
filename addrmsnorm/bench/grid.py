"""The report's standard grid (BENCHMARKING's rows and hidden sizes), shared by the report's sections."""

from __future__ import annotations

import torch

STANDARD_N = [1, 8, 64, 512, 2048, 16384, 65536]
STANDARD_H = [128, 512, 1024, 2048, 2880, 3000, 3584, 4096, 4100, 5120, 7168, 8192, 11111, 14336,
              16384, 32768, 65536, 131072]
QUICK_N = [1, 64, 2048, 16384]
QUICK_H = [128, 1024, 3000, 4096, 4100, 8192, 11111, 14336, 65536]
# Bulk shapes use fewer rows at very large H so that the tensors still fit with buffer rotation.
MAX_ELEMENTS = 1 << 28
DTYPE_NAMES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
EXTRA_DTYPE_SHAPES = [(16384, 4096)]  # fp16, bf16/fp32 and fp32 rows of the quick grid
BULK_ELEMENTS = 1 << 24  # bulk shapes: N * H >= 16M, at every H and dtype
DECODE_SHAPES = [(n, h) for h in (4096, 8192) for n in (1, 8, 64)]
CHAIN = 64
