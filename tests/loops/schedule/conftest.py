"""Schedule tests check well-formedness after every primitive."""
import pytest

from refcomp.loops.schedule import Schedule


@pytest.fixture(autouse=True)
def _verify_every_step():
    old = Schedule.verify_default
    Schedule.verify_default = True
    yield
    Schedule.verify_default = old
