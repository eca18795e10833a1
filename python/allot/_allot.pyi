"""Type stubs of the native module (python/src/lib.rs)."""

from typing import Any, List, Optional, Union

PROTOCOL_VERSION: int

class Grant:
    cell: int
    generation: int
    threads: int
    cpus: List[int]
    lent: List[int]
    stacked: bool
    share: float

class Window:
    origin_ns: int
    period: float
    budget: float
    open: bool
    edge_ns: Optional[int]

class Cell:
    def __init__(
        self,
        name: str = "python",
        *,
        min: int = 0,
        max: int = 0,
        weight: int = 1,
        exclusive: bool = False,
        wait: bool = False,
        socket: Optional[str] = None,
        fallback: bool = True,
        cpus: Optional[int] = None,
        period: Optional[float] = None,
        budget: Optional[float] = None,
        fraction: Optional[float] = None,
        slice: Optional[float] = None,
        goal: Optional[str] = None,
        memory_min: Union[int, str, None] = None,
        memory_max: Union[int, str, None] = None,
        cache_ways: int = 0,
        mem_bandwidth: int = 0,
    ) -> None: ...
    @staticmethod
    def auto(name: str = "python") -> "Cell": ...
    @staticmethod
    def standalone() -> "Cell": ...
    @property
    def mode(self) -> str: ...
    @property
    def reason(self) -> Optional[str]: ...
    @property
    def id(self) -> int: ...
    @property
    def broker_up(self) -> bool: ...
    def grant(self) -> Grant: ...
    def window(self) -> Window: ...
    def wait_window(self) -> Window: ...
    def heartbeat(self, n: int = 1) -> None: ...
    def report_latency(self, seconds: float) -> None: ...
    def set_goal(self, goal: str) -> None: ...
    def set_memory(
        self, min: Union[int, str, None] = None, max: Union[int, str, None] = None
    ) -> None: ...
    def set_cache(self, ways: int = 0, bandwidth: int = 0) -> None: ...
    def threads(self) -> int: ...
    def wait_change(self, seen: Optional[int] = None, timeout: Optional[float] = None) -> Grant: ...
    def report(self, busy: int, wanted: int, progress: int) -> None: ...
    def interrupt_waits(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Cell": ...
    def __exit__(self, *args: Any) -> bool: ...

class Outcome:
    ncores: int
    cpus: List[int]
    nodes: List[int]

class Require:
    def __init__(
        self,
        *,
        cores: Optional[int] = None,
        fair: bool = False,
        cpu_fraction: Optional[float] = None,
        cpu_device: int = 0,
        numa_nodes: Optional[int] = None,
    ) -> None: ...
    def __enter__(self) -> Outcome: ...
    def __exit__(self, *args: Any) -> bool: ...

def allowed_cpus() -> List[int]: ...
def release_on(waits: str) -> str: ...
def given_back() -> int: ...
