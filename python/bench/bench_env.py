"""What the Python benchmarks record about the machine beside their figures."""

import platform


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what platform knows, else "unknown"."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
