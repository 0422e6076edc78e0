"""HeadNotifier wakes async waiters from another thread as soon as a commit is published."""

import asyncio
import threading
import time

from pgfeed.feeds.notify import HeadNotifier


def test_waiter_wakes_within_milliseconds_of_a_publish_from_another_thread():
    notifier = HeadNotifier(head=10)

    async def scenario():
        threading.Timer(0.05, notifier.publish, args=(20,)).start()
        start = time.perf_counter()
        head = await notifier.wait_beyond(10, timeout=5)
        return head, time.perf_counter() - start

    head, waited = asyncio.run(scenario())
    assert head == 20
    assert 0.04 < waited < 0.5


def test_returns_at_once_when_already_beyond_and_times_out_otherwise():
    notifier = HeadNotifier(head=10)

    async def scenario():
        immediate = await notifier.wait_beyond(5, timeout=5)
        start = time.perf_counter()
        timed_out = await notifier.wait_beyond(10, timeout=0.05)
        return immediate, timed_out, time.perf_counter() - start

    immediate, timed_out, waited = asyncio.run(scenario())
    assert immediate == 10 and timed_out == 10 and waited >= 0.05
    notifier.publish(5)  # never moves backward
    assert notifier.head == 10


def test_a_done_stop_future_ends_the_wait_and_leaves_no_waiter_behind():
    notifier = HeadNotifier(head=10)

    async def scenario():
        loop = asyncio.get_running_loop()
        stop = loop.create_future()
        loop.call_later(0.05, stop.set_result, None)
        start = time.perf_counter()
        head = await notifier.wait_beyond(10, timeout=5, stop=stop)
        waited = time.perf_counter() - start
        already = await notifier.wait_beyond(10, timeout=5, stop=stop)  # stop is done: at once
        return head, waited, already

    head, waited, already = asyncio.run(scenario())
    assert head == 10 and already == 10 and 0.04 < waited < 1
    assert notifier.waiting() == 0  # timed-out and stopped waits unregister themselves


def test_commits_published_while_the_loop_is_busy_wake_its_waiters_once():
    # One thread-safe call per loop, not per waiter, and none while one is pending: the
    # publishing (capture) thread's cost does not grow with subscribers, bursts coalesce.
    notifier = HeadNotifier(head=10)
    calls = []

    async def scenario():
        loop = asyncio.get_running_loop()
        real = loop.call_soon_threadsafe

        def counting(*args):
            calls.append(args)
            return real(*args)

        loop.call_soon_threadsafe = counting
        waits = [asyncio.create_task(notifier.wait_beyond(10, timeout=5)) for _ in range(50)]
        await asyncio.sleep(0)  # all 50 registered
        assert notifier.waiting() == 50
        for head in range(11, 21):  # a burst, while the loop does not run
            notifier.publish(head)
        return await asyncio.gather(*waits)

    heads = asyncio.run(scenario())
    assert heads == [20] * 50
    assert len(calls) == 1
    assert notifier.waiting() == 0


def test_a_cancelled_wait_leaves_the_others_waiting_and_no_waiter_behind():
    notifier = HeadNotifier(head=10)

    async def scenario():
        gone = asyncio.create_task(notifier.wait_beyond(10, timeout=5))
        stays = asyncio.create_task(notifier.wait_beyond(10, timeout=5))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.sleep(0)
        assert notifier.waiting() == 1
        threading.Timer(0.02, notifier.publish, args=(11,)).start()
        return await stays

    assert asyncio.run(scenario()) == 11
    assert notifier.waiting() == 0


def test_a_long_wait_ends_at_its_deadline_by_the_sweep():
    # Waits of SWEPT_WAIT seconds or more have no timer of their own: the loop's sweep ends them.
    from pgfeed.feeds import notify

    notifier = HeadNotifier(head=10)

    async def scenario():
        start = time.perf_counter()
        head = await notifier.wait_beyond(10, timeout=notify.SWEPT_WAIT)
        return head, time.perf_counter() - start

    head, waited = asyncio.run(scenario())
    assert head == 10
    assert notify.SWEPT_WAIT <= waited < notify.SWEPT_WAIT + 3 * notify.SWEEP_SECONDS + 0.5
    assert notifier.waiting() == 0
