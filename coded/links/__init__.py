"""Links of finite bandwidth on one Linux machine: hosts in network namespaces behind links shaped
with ``tc tbf`` (``netns.py``), and slow links as a seeded fault (``slow.py``). Needs root and
iproute2 to make them; the rates and schedules are plain code.

The master's link by default is here, where ``coded local --help`` reads it without loading either.
"""

__all__ = ["MASTER_LINK"]

#: the master's link on links of finite bandwidth: wide, so that the workers' links are what a run measures
MASTER_LINK = "10gbit"
