"""The effect executor: turns the machines' effects (data) into Kubernetes requests.

Every effect is idempotent: patches carry whole desired lists, a migration has a name
of the machine's choosing (creating it twice finds it; KubeVirt refusing it because the
VMI migrates already is "decide again"), a restart is a compare-and-swap
on the VMI's uid. A patch also carries what its decision read (the pod's requests, the
KVVM template and its resourceVersion, the launcher pods whose SDN was ready): each
attempt checks that against the object as the informers hold it now (`Cached`; read
fresh from the server only when no cache is given or the object is not in it), and a
world that moved since is `RetryAfterObservation` — decide again — however long the
effect waited or retried. The write itself pins what was read (JSON-patch `test` ops
on the pod's uid and request annotation, on the KVVM's resourceVersion; a status merge
patch carries the VM's resourceVersion), so a cache behind the server makes the
server refuse the write (422 / 409): nothing is written, and the VM is decided again
from the next world. No GET precedes a write.

`executing.py` holds `KubeExecutor` (decoding, the table from effect type to handler,
errors translated); `order_book.py` orders one VM's pod and KVVM writes; one module
per family of effects does them: `pods.py`, `kvvm.py`, `conditions.py`, `restarts.py`
(restarts and VM operations), `migrations.py`, `events.py`; `cluster.py` is what they
all write through.
"""

from nicplug.adapters.core.executor.cluster import Cached
from nicplug.adapters.core.executor.executing import KubeExecutor
from nicplug.adapters.core.executor.restarts import vm_operation_name

__all__ = ["Cached", "KubeExecutor", "vm_operation_name"]
