"""Links of finite bandwidth on one Linux machine: hosts in network namespaces behind links shaped
with ``tc tbf`` (``netns.py``), and slow links as a seeded fault (``slow.py``). Needs root and
iproute2 to make them; the rates and schedules are plain code.
"""
