"""``mrc dash``: a live web view of a running fabric and its MRC connections.

One page, pushed 5 times a second over server-sent events: the fabric's
planes, spines, leaves and host ports with every link coloured by state and
load; per-plane and per-host rates over the last 60 s; every MRC context in
the fabric's hosts (found through its control socket) with its QPs, and a
chosen QP's EVs as a planes x EVs grid; the EV events and the links' changes
on a timeline; the switch queues' counters. Buttons fail, heal, flap, add
loss to or rate-limit a link or switch through the same code as ``mrc
fabric``, with the token printed at start. docs/dash.md has the details.

- :mod:`mrc.dash.model`: the JSON, from plain data (pure);
- :mod:`mrc.dash.collect`: the sampler thread;
- :mod:`mrc.dash.server`: the aiohttp server (``pip install mrc[dash]``).
"""
