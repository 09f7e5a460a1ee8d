"""Stability charts through an executor (``executor=`` of ddesys.matrix.chart): the same numbers as the
serial run, bit for bit; only picklable arrays travel; the closed-form boundary of x' = -k x(t - tau)
(stable iff k tau < pi/2) as the independent check of a chart run in a process pool."""
import pickle
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pytest

from ddesys import DelayStateSpace
from ddesys.matrix.chart import delay_chart, stability_chart

RNG = np.random.default_rng(3)
A = RNG.standard_normal((2, 2)) / 2 - np.eye(2)
AD = RNG.standard_normal((2, 2, 2)) / 2
T1, T2 = np.linspace(0.1, 4.0, 13), np.linspace(0.1, 3.0, 11)       # 143 points: several batches


@pytest.fixture(scope="module")
def pool():
    with ProcessPoolExecutor(max_workers=2) as ex:
        yield ex


@pytest.fixture(scope="module")
def serial():
    return delay_chart(A, AD, T1, T2)                                # workers=None: the default


def same(a, b):
    for name in ("abscissa", "stable", "converged", "n_grid", "x", "y"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.abscissa.tobytes() == b.abscissa.tobytes()            # bit for bit, nan and -0.0 included


def test_process_pool_gives_the_serial_numbers_bitwise(pool, serial):
    assert np.unique(serial.n_grid).size >= 1 and serial.stable.any() and not serial.stable.all()
    same(delay_chart(A, AD, T1, T2, executor=pool, workers=2), serial)
    same(delay_chart(A, AD, T1, T2, executor=pool, workers=1), serial)
    same(delay_chart(A, AD, T1, T2, workers=1), serial)


def test_thread_pool_executor_and_the_method(serial):
    with ThreadPoolExecutor(max_workers=3) as ex:
        same(DelayStateSpace(A, AD, [1.0, 1.0]).stability_chart(T1, T2, executor=ex, workers=3), serial)


def test_lambda_system_fn_runs_with_a_process_pool(pool):
    """system_fn stays in the calling process: a lambda is fine; the closed form decides each point."""
    tau, k = np.linspace(0.05, 3.0, 25), np.linspace(0.1, 2.0, 20)
    ch = stability_chart(lambda t, g: ([[0.0]], [[-g]], [t]), tau, k, executor=pool, workers=2)
    kt = k[:, None] * tau[None, :]
    far = np.abs(kt - np.pi / 2) > 1e-3
    assert far.sum() > 400
    np.testing.assert_array_equal(ch.stable[far], (kt < np.pi / 2)[far])


class LazyExecutor:
    """Runs a task only when its result is asked; records the tasks in flight and pickles every task."""

    def __init__(self):
        self.in_flight = self.most = self.sent = 0

    def submit(self, fn, *args):
        pickle.dumps((fn, args))                     # what a process pool would send must pickle
        self.in_flight += 1
        self.sent += 1
        self.most = max(self.most, self.in_flight)
        ex = self

        class Fut:
            def result(self):
                ex.in_flight -= 1
                return fn(*args)

            def cancel(self):
                return True

        return Fut()


def test_batches_in_flight_are_bounded_by_workers(serial):
    ex = LazyExecutor()
    ch = delay_chart(A, AD, T1, T2, executor=ex, workers=2)
    same(ch, serial)
    assert ex.sent >= 3 and ex.most == 2 and ex.in_flight == 0


class FailingExecutor(LazyExecutor):
    def submit(self, fn, *args):
        fut = super().submit(fn, *args)

        class Bad:
            def result(self):
                fut.result()
                raise RuntimeError("worker lost")

            def cancel(self):
                return True

        return Bad()


def test_executor_errors_propagate_and_bad_executor():
    with pytest.raises(RuntimeError, match="worker lost"):
        delay_chart(A, AD, T1, T2, executor=FailingExecutor(), workers=2)
    with pytest.raises(TypeError, match="executor must be a concurrent.futures.Executor"):
        delay_chart(A, AD, T1, T2, executor=4)
