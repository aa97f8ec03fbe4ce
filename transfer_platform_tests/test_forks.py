"""The fork server shared by the resident command process and the run workers' preloaded parent
(``transfer_platform.runtime.forks``): a forked child's garbage collections leave the heap it
inherited shared with its parent.

A collection that walks an inherited object writes to its header, so the kernel copies the page it
lives on into the child: on a parent that has imported Dagster, the definitions and the data path,
that is every page of a few hundred MB, 0.2-0.4 s of a small transfer. The page faults of the
child's first full collection tell it, measured in a Python of its own (objects frozen stay frozen
for the life of the process that froze them)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD_FAULTS = textwrap.dedent("""
    import gc, os, resource, sys
    from transfer_platform.runtime.forks import ForkServer

    heap = [[i, str(i)] for i in range(400_000)]  # ~60 MB of objects the collector tracks
    read, write = os.pipe()

    def child():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        gc.collect()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        os.write(write, str(faults).encode())
        return 0

    if sys.argv[1] == "fork server":
        pid = ForkServer(code=list).fork(child)
    else:  # a bare os.fork: what the measure sees when the inherited heap is walked
        pid = os.fork()
        if pid == 0:
            os._exit(child())
    os.close(write)
    print(os.read(read, 64).decode())
    os.waitpid(pid, 0)
""")


def child_collection_faults(how: str) -> int:
    """Page faults of the first full garbage collection in a child forked ``how``."""
    done = subprocess.run([sys.executable, "-c", CHILD_FAULTS, how], capture_output=True, text=True, timeout=120,
                          check=True)
    return int(done.stdout.strip())


def test_a_forked_childs_garbage_collection_leaves_the_inherited_heap_shared():
    bare = child_collection_faults("bare fork")  # the heap's ~15,000 pages, copied as they are walked
    served = child_collection_faults("fork server")
    assert bare > 5_000, f"the measure does not see a bare fork's collection copy the heap ({bare} faults)"
    assert served < bare / 10, f"the fork server's child copied the inherited heap: {served} faults against {bare}"
