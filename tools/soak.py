#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""Soak: mixed operations at a fixed rate against the clustered box.

Starts the box of ``tests/functional/test_cluster.py`` (MariaDB, etcd, two
volume services in one cluster, the tgt backend) and, for ``--minutes``,
starts ``--rate`` operations a second: attach (one of four hosts),
attachment delete, os-force_detach through the API, the CLI's
``volume force-detach``, and now and then a volume created or deleted.
Every 15 s, and at the end once the volumes settle, the invariant is
checked on every volume not in transition: ``available`` => no target;
otherwise the target's ACLs are exactly the initiators of its attached
hosts, and a volume that is not multiattach has at most one attachment.

Usage (from the repository root)::

    .venv/bin/python tools/soak.py --minutes 30 --rate 2
    .venv/bin/python tools/soak.py --minutes 10 --volumes 4 \
        --history /tmp/history.jsonl --faults

With ``--history FILE`` it is also a Jepsen-style run
(:mod:`tests.support.history`): every attached host runs a live initiator
that writes, every ~0.2 s, a 4 KiB block of its own pattern into a slot of
its own (never written twice); every operation, write, observation and
fault is recorded with its start and end; ``--faults`` adds faults to the
schedule: a volume service SIGKILLed at a random step of a force-detach
(then restarted, the force-detach run again), the leader of the 3-member
etcd SIGKILLed (restarted 2-8 s later), a volume service cut off etcd,
MariaDB, RabbitMQ or all three for 2-15 s (a force-detach that failed
during any fault is run again through the CLI once it is over) and the
operator's status-only reset of an in-use volume (Horizon's "Update
Volume Status"), after which another host may be attached.  No volume is
deleted.  At the end the history is written to FILE and checked against
what landed on each volume: a write landing after its host was cut, two
hosts writing a volume that is not multiattach, ``available`` with a
target, an attachment lost or unknown.

Prints a summary line and exits 0 only with no violation and no HTTP 500.
A refusal (4xx) of a call that raced another is counted by kind, not as a
failure; so is the driver's refusal to grant a host whose attachment a
force-detach ended (Cinder's attachment update reports it as a 500: counted
as ``attach 500 refused``).  A failed attach is cleaned up as Nova does
(attachment delete).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from tests.support import cluster as tc  # noqa: E402
from tests.support.soak import Soak  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--minutes', type=float, default=30)
    parser.add_argument('--rate', type=int, default=2,
                        help='operations started a second')
    parser.add_argument('--volumes', type=int, default=8)
    parser.add_argument('--seed', type=int, default=1124)
    parser.add_argument('--history', metavar='FILE',
                        help='a Jepsen-style run: writers on every attached '
                             'host, the history written to FILE and '
                             'checked at the end')
    parser.add_argument('--faults', action='store_true',
                        help='with --history: SIGKILL a volume service '
                             'mid force-detach or the etcd leader, reset an '
                             'in-use volume\'s status alone')
    parser.add_argument('--keep', action='store_true',
                        help='leave the box running (its state directory '
                             'is printed)')
    args = parser.parse_args(argv)
    if args.faults and not args.history:
        parser.error('--faults needs --history')
    box = tc.ClusterBox()
    try:
        box.up()
        print('box up: %s' % box.state, flush=True)
        return Soak(box, args).run()
    finally:
        if args.keep:
            print('box kept: %s' % box.state)
        else:
            box.down()


if __name__ == '__main__':
    sys.exit(main())
