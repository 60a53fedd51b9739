"""The follower's fetch loop over TCP (cluster_node.RemoteController._replicate): the next Fetch
to a leader goes from the task that applied the last answer -- no task and no turn of the
fetcher loop per replication round -- while every other request the poll hands out still goes
as its own task, the loop is woken when the task ends, and the leader is never fetched from
twice at once (Kafka's fetcher thread: one per leader, looping on its fetches)."""
from __future__ import annotations

import asyncio
import types

from storage.replication import messages as m
from storage.wire.cluster_node import RemoteController


class _Fetcher:
    """Hands out `fetches` Fetches to leader 1 (and, once, an OffsetForLeaderEpoch to leader 2),
    one poll at a time, as ReplicaFetcher.poll does: none to a leader in `fetching`."""

    def __init__(self, fetches: int):
        self.left = fetches
        self.epoch_sent = False
        self.polls: list[set] = []

    def poll(self, fetching=()):
        self.polls.append(set(fetching))
        out = []
        if 1 not in fetching and self.left:
            self.left -= 1
            out.append((1, m.FetchRequest(3, 7, [])))
        if not self.epoch_sent:
            self.epoch_sent = True
            out.append((2, m.OffsetForLeaderEpochRequest(3, [])))
        return out


def _controller(fetches: int, **state) -> tuple[RemoteController, _Fetcher, list]:
    controller = RemoteController(("127.0.0.1", 1))
    fetcher = _Fetcher(fetches)
    controller.broker = types.SimpleNamespace(caught_up=True, logdir=types.SimpleNamespace(offline=False),
                                              manager=types.SimpleNamespace(fetcher=fetcher))
    for name, value in state.items():
        setattr(controller, name, value)
    sent = []

    async def exchange(leader, request):
        sent.append((leader, type(request).__name__, asyncio.current_task(), set(controller._fetching)))
        await asyncio.sleep(0)

    controller._exchange = exchange
    return controller, fetcher, sent


def test_the_next_fetch_to_a_leader_goes_from_the_task_that_applied_the_answer():
    async def run():
        controller, fetcher, sent = _controller(4)
        controller._fetch_wakeup = wakeup = asyncio.Event()
        controller._fetching.add(1)             # as the fetcher loop sends the first
        await controller._replicate(1, m.FetchRequest(3, 7, []))
        for _ in range(3):
            await asyncio.sleep(0)              # the epoch request's own task
        return controller, fetcher, sent, wakeup

    controller, fetcher, sent, wakeup = asyncio.run(run())
    fetches = [s for s in sent if s[1] == "FetchRequest"]
    assert len(fetches) == 5, "every Fetch the poll handed out went, in the first one's task"
    assert len({s[2] for s in fetches}) == 1, "one task for all the rounds to leader 1"
    assert all(s[3] == {1} for s in fetches), "leader 1 marked in flight while each was out"
    epochs = [s for s in sent if s[1] == "OffsetForLeaderEpochRequest"]
    assert len(epochs) == 1 and epochs[0][2] is not fetches[0][2], "another leader's request: its own task"
    assert all(1 not in polled for polled in fetcher.polls), "polled with leader 1 free, so its next Fetch comes"
    assert controller._fetching == set() and wakeup.is_set(), "nothing ready: the loop is woken, no Fetch out"


def test_the_loop_of_fetches_ends_when_the_broker_stops():
    async def run():
        controller, fetcher, sent = _controller(5, _stopping=True)
        controller._fetching.add(1)
        await controller._replicate(1, m.FetchRequest(3, 7, []))
        return controller, sent

    controller, sent = asyncio.run(run())
    assert len(sent) == 1 and controller._fetching == set()


def test_a_failed_exchange_frees_the_leader_and_wakes_the_loop():
    async def run():
        controller, fetcher, sent = _controller(5)
        controller._fetch_wakeup = wakeup = asyncio.Event()

        async def broken(leader, request):
            raise RuntimeError("boom")

        controller._exchange = broken
        controller._fetching.add(1)
        try:
            await controller._replicate(1, m.FetchRequest(3, 7, []))
        except RuntimeError:
            pass
        return controller, wakeup

    controller, wakeup = asyncio.run(run())
    assert controller._fetching == set() and wakeup.is_set()
