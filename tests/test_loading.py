"""The one loader: a wrong task's error names the command and facade that run it, and every task
names a facade ``transduce.load`` can return and a command that exists."""

import pytest

import transduce
from transduce.cli.main import COMMANDS
from transduce.loading import wrong_task
from transduce.tasks import TASKS


def test_a_wrong_task_names_its_command_and_facade():
    message = str(wrong_task("runs/vit", TASKS["image-classification"], "translate"))
    assert message == ("runs/vit is an image classifier, which does not translate; use "
                       "`transduce classify` with it (in Python: transduce.Classifier, or "
                       "transduce.load)")


@pytest.mark.parametrize("task", TASKS.values(), ids=list(TASKS))
def test_every_task_names_a_facade_and_commands_that_exist(task):
    facade = getattr(transduce, task.facade)
    assert callable(facade.load)
    assert task.verb in COMMANDS and set(task.commands) <= set(COMMANDS)
