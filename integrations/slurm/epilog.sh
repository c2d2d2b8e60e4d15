#!/bin/sh
# Slurm epilog: put this node's GPUs back at their power limit after every job step, whatever
# ended it. A run with power_limit="optimize" restores on every exit it sees and its watchdog
# after SIGKILL; when Slurm kills the step's whole cgroup, both go down together, and the
# records of the limits they changed (in the node's records folder) say what to put back.
#
# Install (as root, on every GPU node):
#   install -m 0755 integrations/slurm/epilog.sh /etc/slurm/epilog.d/zeus-bso-power.sh
#   slurm.conf:  Epilog=/etc/slurm/epilog.d/*
# Settings (the defaults below): ZEUS_BSO, the zeus-bso command; ZEUS_BSO_POWER_RECORDS, the
# folder the runs on this node use (the same path in their environment).
#
# A GPU that cannot be put back makes the epilog fail, and Slurm drains the node: a capped GPU
# would slow every later job there. A node without zeus-bso has nothing to restore.

ZEUS_BSO="${ZEUS_BSO:-/opt/zeus-bso/bin/zeus-bso}"
RECORDS="${ZEUS_BSO_POWER_RECORDS:-/run/zeus-bso/power-limits}"

if [ ! -x "$ZEUS_BSO" ]; then
    exit 0
fi
exec "$ZEUS_BSO" power restore --records "$RECORDS"
