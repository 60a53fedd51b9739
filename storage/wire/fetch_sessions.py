"""Incremental fetch sessions (KIP-227), as Kafka's FetchSession.scala keeps them.

A Fetch v7+ names a session by (session_id, session_epoch):

  - epoch -1 (FINAL): a full fetch with no session (session_id 0); a session_id given with it
    is closed first;
  - epoch 0 (INITIAL): a full fetch; a session_id given is closed, and a new session holding
    the request's partitions is made when the cache has room or may evict (the answer carries
    its id; else 0);
  - epoch n > 0: an incremental fetch of session `session_id` at epoch n: FETCH_SESSION_ID_NOT_FOUND
    (70) when there is no such session, INVALID_FETCH_SESSION_EPOCH (71) when its epoch is not n,
    FETCH_SESSION_TOPIC_ID_ERROR (106) when it was made with topic ids (v13+) and the request
    has none, or the other way round.  Otherwise the request's partitions are added to the
    session or update it, forgotten_topics_data leave it, and every partition of the session is
    read; the answer holds only those with news (records, a changed high watermark or log start
    offset, an error, a diverging epoch), and a partition that returned records moves to the end
    of the session's order.  A session left with no partition is closed (a sessionless answer).

The cache (FetchSessionCache) holds at most `max_entries` sessions (Kafka's
max.incremental.fetch.session.cache.slots, 1000); a new one evicts (tryEvict) the least recently
used session idle longer than `eviction_ms` (120000), or else the least valuable one by
(privileged, size, id) -- a follower's session (privileged) may evict a consumer's, a larger one
a smaller one -- among those older than eviction_ms (a consumer's) or any consumer's (for a
privileged newcomer).
"""
from __future__ import annotations

import random

from ..core.clock import monotonic_ms
from ..core.errors import Errors
from ..replication import messages as m

INVALID_SESSION_ID = 0
INITIAL_EPOCH, FINAL_EPOCH = 0, -1
DEFAULT_SLOTS, DEFAULT_EVICTION_MS = 1000, 120_000


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: 0 -> 1, n -> n + 1, wrapping from int32 max to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 2**31 - 1 else epoch + 1


class CachedPartition:
    """A partition of a session: the request's parameters and what it was last told."""

    __slots__ = ("topic", "topic_id", "request", "high_watermark", "log_start_offset", "name")

    def __init__(self, topic: str, topic_id: int, request: m.FetchPartition):
        self.topic, self.topic_id, self.request = topic, topic_id, request
        self.name = (topic, request.partition)
        self.high_watermark = -1            # nothing told yet: the first answer always includes it
        self.log_start_offset = -1

    def must_respond(self, answer) -> bool:
        """Kafka's maybeUpdateResponseData (updating): whether the answer of this partition goes
        out, remembering what it told."""
        respond = bool(len(answer.records)) or answer.error_code != Errors.NONE or \
            answer.diverging_epoch is not None and answer.diverging_epoch.epoch >= 0
        if self.high_watermark != answer.high_watermark:
            respond, self.high_watermark = True, answer.high_watermark
        if self.log_start_offset != answer.log_start_offset:
            respond, self.log_start_offset = True, answer.log_start_offset
        if answer.error_code != Errors.NONE:
            self.high_watermark = -1        # resent once the error goes away
        return respond


class FetchSession:
    """A session: its partitions by key (in order), `names` (topic, partition) -> key.  A
    follower's session also keeps its `still` partitions: (topic, partition) -> the leader's
    FollowerState of it, for those its follower is caught up on and nothing moved since (a
    fetch does not read them, only touches their follower's clock; ReplicaManager.still_follower),
    valid while `still_token` is the manager's; `moved` the still ones an append took out of it
    during the fetch in progress (read before it is answered)."""

    __slots__ = ("id", "privileged", "partitions", "uses_topic_ids", "creation_ms", "last_used_ms", "epoch",
                 "cached_size", "by_privileged", "by_all", "names", "still", "still_token", "moved")

    def __init__(self, session_id: int, privileged: bool, partitions: dict, uses_topic_ids: bool, now: int):
        self.id, self.privileged, self.partitions = session_id, privileged, partitions
        self.names = {c.name: k for k, c in partitions.items() if c is not None}
        self.still, self.still_token, self.moved = {}, None, []
        self.uses_topic_ids, self.creation_ms, self.last_used_ms = uses_topic_ids, now, now
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.cached_size = len(partitions)
        self.by_privileged = self.by_all = False     # in Kafka's evictableByPrivileged / ByAll

    def evictable_key(self) -> tuple:
        return (self.privileged, self.cached_size, self.id)


class FetchSessionCache:
    """Kafka's FetchSessionCacheShard (one shard): the sessions, their eviction order."""

    def __init__(self, max_entries: int = DEFAULT_SLOTS, eviction_ms: int = DEFAULT_EVICTION_MS, *,
                 clock=None, rng: random.Random | None = None):
        self.max_entries, self.eviction_ms = max_entries, eviction_ms
        self.clock = clock or monotonic_ms
        self.rng = rng or random.Random()
        self.sessions: dict[int, FetchSession] = {}
        self.followers: dict[int, FetchSession] = {}     # the privileged ones (followers')
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def _new_id(self) -> int:
        while True:
            session_id = self.rng.randint(1, 2**31 - 1)
            if session_id not in self.sessions:
                return session_id

    def maybe_create(self, privileged: bool, partitions: dict, uses_topic_ids: bool) -> int:
        """A new session of these partitions when there is room or an entry may be evicted:
        its id, else INVALID_SESSION_ID."""
        now = self.clock()
        if len(self.sessions) >= self.max_entries and \
                not self._try_evict(privileged, (privileged, len(partitions), 0), now):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, partitions, uses_topic_ids, now)
        self.sessions[session.id] = session
        if privileged:
            self.followers[session.id] = session
        self.touch(session, now)
        return session.id

    def _try_evict(self, privileged: bool, key: tuple, now: int) -> bool:
        if not self.sessions:
            return False
        stale = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stale.last_used_ms > self.eviction_ms:
            self.remove(stale.id)
            self.evictions += 1
            return True
        candidates = [s for s in self.sessions.values() if (s.by_privileged if privileged else s.by_all)]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if key < victim.evictable_key():
            return False
        self.remove(victim.id)
        self.evictions += 1
        return True

    def remove(self, session_id: int) -> FetchSession | None:
        self.followers.pop(session_id, None)
        return self.sessions.pop(session_id, None)

    def moved(self, keys) -> list[int]:
        """Partitions `keys` ((topic, partition); None: all) moved: they are still in no
        follower's session any more.  The ids of the sessions that had one of them."""
        woken = []
        for session in self.followers.values():
            still = session.still
            if not still:
                continue
            if keys is None:
                session.moved += still
                still.clear()
                woken.append(session.id)
                continue
            for key in keys:
                if still.pop(key, None) is not None:
                    session.moved.append(key)
                    if not woken or woken[-1] != session.id:
                        woken.append(session.id)
        return woken

    def touch(self, session: FetchSession, now: int) -> None:
        """Kafka's touch: last use now; the size and the eviction sets as of now."""
        session.last_used_ms = now
        session.cached_size = len(session.partitions)
        old = now - session.creation_ms > self.eviction_ms
        session.by_privileged = not session.privileged or old
        session.by_all = old


class FetchContext:
    """What one Fetch reads and how its answer is cut: `partitions` to read (the request's, or
    the session's), then `answer(read)` -> (error code, session id, partitions to send)."""

    def __init__(self, kind: str, partitions: list, *, error: int = Errors.NONE, session: FetchSession | None = None,
                 cache: FetchSessionCache | None = None, privileged: bool = False, uses_topic_ids: bool = False,
                 topic_ids: dict | None = None):
        self.kind, self.partitions, self.error = kind, partitions, error
        self.session, self.cache, self.privileged = session, cache, privileged
        self.uses_topic_ids, self.topic_ids = uses_topic_ids, topic_ids or {}
        self.expected_epoch = session.epoch if session is not None else None

    def answer(self, read: list) -> tuple[int, int, list]:
        if self.kind == "error":
            return self.error, INVALID_SESSION_ID, []
        if self.kind == "sessionless":
            return Errors.NONE, INVALID_SESSION_ID, read
        if self.kind == "full":
            cached = {}
            for p in self.partitions:
                cached[_key(self.uses_topic_ids, p.topic, self.topic_ids.get(p.topic, 0), p.partition)] = \
                    CachedPartition(p.topic, self.topic_ids.get(p.topic, 0), p)
            by_partition = {(p.topic, p.partition): p for p in read}
            for part in cached.values():
                got = by_partition.get((part.topic, part.request.partition))
                if got is not None:
                    part.must_respond(got)
            return Errors.NONE, self.cache.maybe_create(self.privileged, cached, self.uses_topic_ids), read
        session, out = self.session, []
        if session.epoch != self.expected_epoch:    # a duplicate request moved it meanwhile
            return Errors.INVALID_FETCH_SESSION_EPOCH, session.id, []
        keys = session.names
        for p in read:
            key = keys.get((p.topic, p.partition))
            cached = session.partitions.get(key)
            if cached is None or cached.must_respond(p):
                out.append(p)
                if cached is not None and len(p.records):
                    session.partitions[key] = session.partitions.pop(key)    # to the end of the order
        return Errors.NONE, session.id, out


def _key(uses_topic_ids: bool, topic: str, topic_id: int, partition: int) -> tuple:
    return (topic_id, partition) if uses_topic_ids else (topic, partition)


class FetchManager:
    """Kafka's FetchManager.newContext over one FetchSessionCache."""

    def __init__(self, cache: FetchSessionCache):
        self.cache = cache

    def new_context(self, version: int, session_id: int, epoch: int, privileged: bool, partitions: list,
                    forgotten: list, topic_ids: dict, still_token=None) -> FetchContext:
        """partitions: the request's m.FetchPartitions; forgotten: (topic, partition) pairs (the
        topic by name; an id resolved to its name); topic_ids: topic name -> id.  An incremental
        context of a follower's session reads neither its still partitions (FetchSession) while
        `still_token` is the one they were found still under, nor those this request names."""
        uses_ids = version >= 13
        if version < 7 or epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.cache.remove(session_id)           # a full fetch closes the session it names
            if version < 7 or epoch == FINAL_EPOCH:
                return FetchContext("sessionless", partitions)
            return FetchContext("full", partitions, cache=self.cache, privileged=privileged, uses_topic_ids=uses_ids,
                                topic_ids=topic_ids)
        session = self.cache.get(session_id)
        if session is None:
            return FetchContext("error", [], error=Errors.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext("error", [], error=Errors.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_ids:
            return FetchContext("error", [], error=Errors.FETCH_SESSION_TOPIC_ID_ERROR)
        still = session.still
        if still and (still_token is None or still_token != session.still_token):
            still.clear()
        session.moved = []
        for p in partitions:
            key = _key(uses_ids, p.topic, topic_ids.get(p.topic, 0), p.partition)
            cached = session.partitions.get(key)
            if cached is None:
                session.partitions[key] = cached = CachedPartition(p.topic, topic_ids.get(p.topic, 0), p)
                session.names[cached.name] = key
            else:
                cached.request = p
            still.pop(cached.name, None)
        for name in forgotten:
            key = session.names.pop(name, None)
            if key is not None:
                del session.partitions[key]
                still.pop(name, None)
        if not session.partitions:
            self.cache.remove(session.id)
            return FetchContext("sessionless", partitions)
        self.cache.touch(session, self.cache.clock())
        session.epoch = next_epoch(session.epoch)
        read = [c.request for c in session.partitions.values() if c.name not in still] if still else \
            [c.request for c in session.partitions.values()]
        return FetchContext("incremental", read, session=session)
