"""mrc: a software implementation of MRC (Multipath Reliable Connection).

The core package never imports scapy (GPL); ``mrc.dissect`` is the optional
extra that does.
"""

__version__ = "0.1.0"
