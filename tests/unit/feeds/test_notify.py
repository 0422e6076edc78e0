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
    assert notifier._waiters == []  # timed-out and stopped waits unregister themselves
