"""tuner/study_store.py on a real SQLite storage: claims (one configuration, one trial)."""

from __future__ import annotations

from optuna.trial import TrialState

from tuner.storage import open_storage
from tuner.study_store import StudyStore, list_studies, study_id


def _store(tmp_path, name="s") -> StudyStore:
    return StudyStore.open(open_storage(f"sqlite:///{tmp_path / 'c.db'}"), name, create=True)


def test_a_configuration_is_claimed_once_until_its_holder_is_reclaimable(tmp_path):
    store = _store(tmp_path)
    a, b, c = (store.study.ask().number for _ in range(3))
    never = lambda holder: False  # noqa: E731
    assert store.claim("k1", a, is_reclaimable=never) is None
    assert store.claim("k1", a, is_reclaimable=never) is None  # the holder itself
    assert store.claim("k1", b, is_reclaimable=never) == a
    seen = []

    def failed(holder):
        seen.append(holder)
        return holder.state == TrialState.FAIL

    assert store.claim("k1", b, is_reclaimable=failed) == a  # a is still running
    assert [t.number for t in seen] == [a] and seen[0].state == TrialState.RUNNING
    store.study.tell(a, state=TrialState.FAIL)
    assert store.claim("k1", b, is_reclaimable=failed) is None  # taken over
    assert store.claim("k1", c, is_reclaimable=never) == b
    store.release("k1", c)  # not the holder: nothing happens
    assert store.claim("k1", c, is_reclaimable=never) == b
    store.release("k1", b)
    assert store.claim("k1", c, is_reclaimable=never) is None


def test_claims_are_per_study_and_ids_come_from_the_storage(tmp_path):
    one, two = _store(tmp_path, "one"), _store(tmp_path, "two")
    t1, t2 = one.study.ask().number, two.study.ask().number
    assert one.claim("k", t1, is_reclaimable=lambda h: False) is None
    assert two.claim("k", t2, is_reclaimable=lambda h: False) is None
    url = f"sqlite:///{tmp_path / 'c.db'}"
    assert list_studies(url) == ["one", "two"]
    assert study_id(url, "two") != study_id(url, "one")
    assert one.trial(t1).number == t1 and one.trial_id(t1) != two.trial_id(t2)
