"""The asynchronous Works of the psyne torch backend, under psyrun on 2 and 3 ranks: every
collective's ``async_op=True`` form (and isend/irecv) completes its Future without ``wait()``
with the right result; a 64 MiB all_reduce returns before it has finished; and every
collective's error (ranks calling it with different counts, roots or calls) is raised through
``wait()`` and through the Future, as psyne's ``MismatchError``."""

import pytest

from conftest import check, launch

pytest.importorskip("torch")


@pytest.mark.parametrize("n", [2, 3])
def test_async_works_complete_alone_and_carry_errors(n):
    check(launch(n, "torch_async.py", timeout=300, env={"PSY_TIMEOUT": "30"}), n, "async OK")
