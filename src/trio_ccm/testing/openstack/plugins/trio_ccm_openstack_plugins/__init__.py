"""Plugins the test world loads into Debian's OpenStack services (run by /usr/bin/python3).

Not part of trio-ccm's import graph: the world copies this folder beside a dist-info folder
that registers the entry points, and puts both on the services' PYTHONPATH.
"""
