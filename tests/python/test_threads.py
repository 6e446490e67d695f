"""The GIL is released while libdqn works: another Python thread makes progress meanwhile."""

import threading
import time

import dqn


def count_while(target):
    """Iterations of a pure-Python loop while target() runs in another thread."""
    done = threading.Event()
    out = {}

    def run():
        t0 = time.perf_counter()
        try:
            target()
        finally:
            out["seconds"] = time.perf_counter() - t0
            done.set()

    th = threading.Thread(target=run)
    n = 0
    th.start()
    while not done.is_set():
        n += 1
    th.join()
    return n, out["seconds"]


def test_updates_run_without_the_gil():
    m = dqn.DQN("CartPole-v1", seed=0, device="cpu", learning_starts=64, batch_size=64)
    m.learn(200)
    # reference: the loop's rate with nothing else running (a bound on what it can do)
    t0, free = time.perf_counter(), 0
    while time.perf_counter() - t0 < 0.2:
        free += 1
    free_rate = free / 0.2
    # one C call doing many updates: with the GIL held the loop would not advance at all
    n, seconds = count_while(lambda: m.train(400))
    assert seconds > 0.2, f"400 updates took only {seconds:.3f} s: too short to judge"
    assert n > 0.05 * free_rate * seconds, (n, free_rate, seconds)
    assert m.get_stats()["updates"] >= 400


def test_learn_in_a_thread():
    """learn() in a worker thread while this one goes on (the loop sleeps a little, so that
    the learner's own Python parts get the GIL)."""
    m = dqn.DQN("CartPole-v1", seed=0, device="cpu", learning_starts=100)
    done = threading.Event()

    def run():
        try:
            m.learn(1500)
        finally:
            done.set()

    th = threading.Thread(target=run)
    n = 0
    th.start()
    while not done.is_set():
        n += 1
        time.sleep(0.0005)
    th.join()
    assert m.num_timesteps == 1500 and m.get_stats()["updates"] > 0
    assert n > 10, n
