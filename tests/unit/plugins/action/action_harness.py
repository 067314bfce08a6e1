"""What the action plugins' tests share: an action run against recorded answers of its module on the host."""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

#: The remote temporary directory the stand-in for _make_tmp_path returns.
REMOTE_TMP = "/home/u/.ansible/tmp/x"


def run_action(action_class, args, answers, check_mode=False, task_vars=None):
    """``action_class``'s run with ``args``, its module answering ``answers`` (one per run, in order): (result, calls),
    calls being what it asked of the host in order - ("module", name, args), ("tmp",), ("transfer", local, remote),
    ("perms", paths). The argument spec is validated as Ansible does; nothing reaches a host."""
    task = SimpleNamespace(args=dict(args), check_mode=check_mode, async_val=0, diff=True, delegate_to=None)
    action = action_class.__new__(action_class)
    action._task = task
    calls = []
    replies = iter(answers)

    def execute(module_name, module_args=None, task_vars=None):
        del task_vars
        calls.append(("module", module_name, dict(module_args)))
        return dict(next(replies))

    def validate(self, argument_spec, **kwargs):
        outcome = ArgumentSpecValidator(argument_spec, **kwargs).validate(dict(task.args))
        if outcome.error_messages:
            raise AnsibleActionFail(outcome.error_messages[0])
        return outcome, outcome.validated_parameters

    action._execute_module = execute
    action._make_tmp_path = lambda: calls.append(("tmp",)) or REMOTE_TMP
    action._transfer_file = lambda local, remote: calls.append(("transfer", local, remote))
    action._fixup_perms2 = lambda paths: calls.append(("perms", paths))
    action._find_needle = lambda where, path: path
    with (
        mock.patch.object(ActionBase, "run", lambda self, tmp=None, task_vars=None: {}),
        mock.patch.object(action_class, "validate_argument_spec", validate),
    ):
        return action.run(task_vars=task_vars or {}), calls
