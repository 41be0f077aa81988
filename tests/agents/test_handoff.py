"""The hand-over of a run queued in this process to an idle worker thread (agents.queue.Seat): a run refused as it
starts writes nothing and gives its thread back. (The hand-over with real servers: tests/processes/test_handoff.py.)"""

import pytest

from agents import queue
from agents.models import Run, RunStatus
from agents.prepare import RunRejected, RunRequest, live_version, prepare_run

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_run_refused_as_it_starts_gives_its_seat_back(operator, assistant, seat):
    version = live_version(operator.tenant, "assistant", None)
    prepared = prepare_run(operator.tenant, version, RunRequest(message="hello", session_id="kept"))
    first = queue.start_queued(prepared, operator.user)
    assert Run.objects.get(pk=first.run.pk).status == RunStatus.RUNNING  # handed to the pool's one thread
    seat.idle(0)  # its turn ended (this test runs none): the thread is idle again

    # The same request again: its session was made meanwhile, so the start is refused once the seat is taken.
    with pytest.raises(RunRejected) as refused:
        queue.start_queued(prepared, operator.user)
    assert refused.value.code == "session_busy"
    assert Run.objects.count() == 1
    assert seat.take_idle() == 0  # the refused start gave the thread back
