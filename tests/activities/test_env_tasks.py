"""The env_tasks activity: a split's ids, fresh instances (uniform or by the run's curriculum), and its refusals."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError

from activities.episode import EnvActivities
from contracts.episode import EnvTasksRequest
from envs.terminal.tasks import SUITE
from rlcore.curriculum import mixed_weights


def test_env_tasks_draws_fresh_instances_by_the_curriculum_and_refuses_what_it_cannot():
    acts = EnvActivities("env-tasks-test")
    assert acts.env_tasks(EnvTasksRequest(env="terminal", split="eval")).task_ids == SUITE.ids("eval")
    plain = acts.env_tasks(EnvTasksRequest(env="terminal", fresh=6, fresh_seed="s1r2")).task_ids
    assert plain == SUITE.fresh(6, "s1r2")
    # an empty record weighs every family alike: the uniform draw, the same ids as without a curriculum
    assert acts.env_tasks(EnvTasksRequest(env="terminal", fresh=6, fresh_seed="s1r2", curriculum="mixed")).task_ids \
        == plain
    history = {"count_lines": [[8, 8], [8, 8]], "csv_sum": [[4, 8]], "rename_ext": [[0, 8], [0, 8], [0, 8]]}
    drawn = acts.env_tasks(EnvTasksRequest(env="terminal", fresh=6, fresh_seed="s1r2", curriculum="mixed",
                                           family_history=history)).task_ids
    assert drawn == SUITE.fresh(6, "s1r2", mixed_weights(SUITE.families, history)) != plain
    for request, why in ((EnvTasksRequest(env="toolcall", fresh=2, fresh_seed="s1r1"), "makes no fresh instances"),
                         (EnvTasksRequest(env="terminal", fresh=2, fresh_seed="s1r1", curriculum="hardest"),
                          "unknown curriculum 'hardest'")):
        with pytest.raises(ApplicationError, match=why) as err:
            acts.env_tasks(request)
        assert err.value.type == "FreshTasksUnavailable" and err.value.non_retryable
