"""rlcore.curriculum: the families a fresh training rollout draws are weighted by how often their groups split."""

from __future__ import annotations

import pytest

from rlcore.curriculum import FLOOR, family_of, mixed_weights, record_groups


def test_record_groups_keeps_each_familys_last_groups_whatever_the_order():
    outcomes = {"b~s1r1-1": [1.0, -1.0, 1.0], "a~s1r1-0": [-1.0, -1.0], "c~s1r1-2": []}
    history = record_groups({}, outcomes)
    assert history == {"a": [[0, 2]], "b": [[2, 3]]}  # an empty group counts for nothing
    assert record_groups({}, dict(reversed(list(outcomes.items())))) == history
    for k in range(2, 6):
        history = record_groups(history, {f"a~s1r{k}-0": [1.0] * k})
    assert history["a"] == [[3, 3], [4, 4], [5, 5]]  # the window: the last 3
    assert history["b"] == [[2, 3]]
    assert record_groups(history, {}) == history and record_groups(history, {}) is not history
    # two instances of one family in one rollout are two groups, in the order of their ids
    assert record_groups({}, {"a~x-1": [1.0], "a~x-0": [-1.0]}, window=5) == {"a": [[0, 1], [1, 1]]}
    assert family_of("count_lines~s1r2-3") == "count_lines" and family_of("count_lines-3") == "count_lines-3"
    with pytest.raises(ValueError, match="window"):
        record_groups({}, {}, window=0)


def test_mixed_weights_favour_families_whose_groups_split():
    history = {"split": [[4, 8]], "failed": [[0, 8]], "failed_twice": [[0, 8], [0, 8]], "solved": [[8, 8]],
               "mostly": [[7, 8]]}
    w = mixed_weights(["new", *history], history)
    assert w["new"] == pytest.approx(1.0) and w["split"] == pytest.approx(1.0)  # never seen: explored first
    assert w["failed"] == pytest.approx(w["solved"])  # symmetric in success and failure
    assert FLOOR < w["failed_twice"] < w["failed"] < w["mostly"] < w["split"]
    # p = 1/10 after 0 of 8: 4 p (1 - p) = 0.36, squared 0.1296
    assert w["failed"] == pytest.approx(FLOOR + (1 - FLOOR) * 0.36 ** 2)
    assert mixed_weights(["a"], {"a": [[0, 8]] * 50})["a"] > FLOOR  # never zero: a family can come back
    assert mixed_weights(["a"], {"a": [[0, 8]]}, sharpness=1.0)["a"] == pytest.approx(FLOOR + (1 - FLOOR) * 0.36)
    with pytest.raises(ValueError, match="floor"):
        mixed_weights(["a"], {}, floor=0.0)
    with pytest.raises(ValueError, match="sharpness"):
        mixed_weights(["a"], {}, sharpness=0.0)
