#!/usr/bin/env python3
"""A BLAS-bound program as users write them: numpy matrix products in a loop.

    blas.py SIZE REPEATS

Multiplies two SIZE x SIZE matrices REPEATS times (numpy's `@`, a dgemm in
whatever BLAS numpy was built with). Small sizes make many short calls (the
case where a BLAS thread pool sized for the whole machine hurts co-running
programs most); large sizes make few long ones. Prints the seconds taken and
an answer that does not depend on the thread count, so that `allot bench
mix` can check every run (`answer=`).
"""
import sys
import time

import numpy as np

size, repeats = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(1)
a = rng.random((size, size))
b = rng.random((size, size))
start = time.perf_counter()
acc = 0.0
for _ in range(repeats):
    c = a @ b
    acc += c[0, 0]
print(f"seconds={time.perf_counter() - start:.3f} answer={round(acc / repeats, 6)}")
