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

Prints a summary line and exits 0 only with no violation and no HTTP 500.
A refusal (4xx) of a call that raced another is counted by kind, not as a
failure; so is the driver's refusal to grant a host whose attachment a
force-detach ended (Cinder's attachment update reports it as a 500: counted
as ``attach 500 refused``).  A failed attach is cleaned up as Nova does
(attachment delete).
"""

import argparse
import collections
import concurrent.futures
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from tests.support import cluster as tc  # noqa: E402

HOSTS = ['soak-h%d' % i for i in range(1, 5)]
TRANSITIONS = ('attaching', 'detaching', 'reserved', 'creating', 'deleting')


#: What our driver says when it refuses to grant a host the force-detach
#: ended (Cinder's attachment update reports every backend error as 500).
REFUSAL = 'a force-detach ended it'


class Soak(object):

    def __init__(self, box, args):
        self.box = box
        self.args = args
        self.rng = random.Random(args.seed)
        self.lock = threading.Lock()
        self.volumes = {}           # id -> multiattach
        self.hosts = {}             # attachment id -> host
        self.ops = 0
        self.errors = collections.Counter()
        self.http500 = 0
        self.checks = 0
        self.violations = []
        # A call in flight may have torn down and not yet told Cinder (or
        # the reverse): the invariant holds between calls, not inside one.
        self.busy = collections.Counter()
        self.started = collections.Counter()
        self.local = threading.local()

    def add_volume(self):
        multi = len(self.volumes) % 2 == 1
        vol_id = self.box.create_volume(multiattach=multi)
        with self.lock:
            self.volumes[vol_id] = multi

    def pick(self):
        """A volume for an operation; busy until :meth:`one` ends."""
        with self.lock:
            vol_id = self.rng.choice(sorted(self.volumes))
            self.busy[vol_id] += 1
            self.started[vol_id] += 1
            self.local.picked.append(vol_id)
            return vol_id

    # -- operations ---------------------------------------------------------

    def attach(self):
        """Attachment create (with the connector), then os-complete.

        A failed os-complete is followed by the attachment's delete, as
        Nova cleans up a failed attach; the error counted is the first.
        """
        vol_id, host = self.pick(), self.rng.choice(HOSTS)
        att = self.box.api('POST', '/attachments', {'attachment': {
            'volume_uuid': vol_id, 'connector': tc.connector(host),
            'mode': 'rw'}})['attachment']
        with self.lock:
            self.hosts[att['id']] = host
        try:
            self.box.api('POST', '/attachments/%s/action' % att['id'],
                         {'os-complete': None})
        except tc.ApiError:
            try:
                self.box.api('DELETE', '/attachments/%s' % att['id'])
            except tc.ApiError:
                pass        # already ended by a force-detach
            raise

    def delete_attachment(self):
        live = [a['id'] for a in self.box.attachments(self.pick())]
        if live:
            self.box.api('DELETE', '/attachments/%s' % self.rng.choice(live))

    def force_detach_api(self):
        self.box.api('POST', '/volumes/%s/action' % self.pick(),
                     {'os-force_detach': {}})

    def force_detach_cli(self):
        """The CLI: every host, or one host when several are attached."""
        vol_id = self.pick()
        args = ['volume', 'force-detach', vol_id]
        live = self.box.attachments(vol_id)
        with self.lock:
            known = [a['id'] for a in live if a['id'] in self.hosts]
            if len(live) > 1 and known:
                att_id = self.rng.choice(known)
                args += ['--attachment', att_id, '--connector', json.dumps(
                    tc.connector(self.hosts[att_id]))]
        res = self.box.manage(*args)
        if res.returncode:
            print('CLI force-detach exit %d: %s' % (
                res.returncode, (res.stderr.strip().splitlines() or ['?'])[-1]
                [:300]), flush=True)
            raise CliFailed(res.returncode)

    def churn(self):
        """Delete an available volume, or create one if some are gone."""
        if len(self.volumes) < self.args.volumes:
            self.add_volume()
            return
        vol_id = self.pick()
        if self.box.volume(vol_id)['status'] == 'available':
            with self.lock:
                self.volumes.pop(vol_id, None)
            self.box.api('DELETE', '/volumes/%s' % vol_id)

    OPERATIONS = (('attach', 40), ('delete_attachment', 25),
                  ('force_detach_api', 15), ('force_detach_cli', 10),
                  ('churn', 3))

    def one(self, name):
        self.local.picked = []
        try:
            getattr(self, name)()
        except tc.ApiError as err:
            refused = REFUSAL in tc.reason_of(err.body)
            with self.lock:
                self.errors['%s %s%s' % (
                    name, err.status, ' refused' if refused else '')] += 1
                if err.status >= 500 and not refused:
                    self.http500 += 1
                    print('500 on %s: %s' % (name, tc.reason_of(err.body)),
                          flush=True)
        except CliFailed as err:
            with self.lock:
                self.errors['%s exit %d' % (name, err.code)] += 1
        except Exception as err:     # a soak records, it does not stop
            with self.lock:
                self.errors['%s %s' % (name, type(err).__name__)] += 1
        with self.lock:
            self.ops += 1
            for vol_id in self.local.picked:
                self.busy[vol_id] -= 1

    # -- the invariant --------------------------------------------------------

    def check(self):
        with self.lock:
            volumes = dict(self.volumes)
        for vol_id, multi in volumes.items():
            with self.lock:
                if self.busy[vol_id]:
                    continue
                generation = self.started[vol_id]
            try:
                status = self.box.volume(vol_id)['status']
                if status in TRANSITIONS:
                    continue
                listed = self.box.attachments(vol_id)
                attached = [a for a in listed if a['status'] == 'attached']
                targets = self.box.target_of(vol_id)
            except tc.ApiError:
                continue    # deleted under us
            acls = set().union(*targets.values()) if targets else set()
            with self.lock:
                if self.started[vol_id] != generation:
                    continue        # a call began while we read
                wanted = {tc.IQN + self.hosts[a['id']] for a in attached
                          if a['id'] in self.hosts}
                # An attach on its way may hold its grant before it completes.
                allowed = wanted | {tc.IQN + self.hosts[a['id']]
                                    for a in listed if a['id'] in self.hosts}
            problems = []
            if status == 'available' and targets:
                problems.append('available with a target %s' % acls)
            elif status != 'available' and not wanted <= acls <= allowed:
                problems.append('ACLs %s, attached hosts %s' % (
                    sorted(acls), sorted(wanted)))
            if not multi and len(attached) > 1:
                problems.append('%d attachments' % len(attached))
            with self.lock:
                self.checks += 1
                for problem in problems:
                    self.violations.append('%s (%s): %s' % (
                        vol_id, status, problem))
                    print('VIOLATION %s' % self.violations[-1], flush=True)

    def run(self):
        for _ in range(self.args.volumes):
            self.add_volume()
        names = [n for n, w in self.OPERATIONS for _ in range(w)]
        end = time.monotonic() + 60 * self.args.minutes
        next_check = time.monotonic() + 15
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            while time.monotonic() < end:
                started = time.monotonic()
                for _ in range(self.args.rate):
                    pool.submit(self.one, self.rng.choice(names))
                if time.monotonic() >= next_check:
                    pool.submit(self.check)
                    next_check = time.monotonic() + 15
                time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
        time.sleep(10)      # let the last calls settle
        self.check()
        print('soak: minutes %s, operations %d, errors %s, http 500: %d, '
              'invariant checks %d, violations %d' % (
                  self.args.minutes, self.ops, dict(self.errors),
                  self.http500, self.checks, len(self.violations)),
              flush=True)
        return 0 if not self.violations and not self.http500 else 1


class CliFailed(Exception):
    def __init__(self, code):
        super(CliFailed, self).__init__('exit %d' % code)
        self.code = code


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--minutes', type=float, default=30)
    parser.add_argument('--rate', type=int, default=2,
                        help='operations started a second')
    parser.add_argument('--volumes', type=int, default=8)
    parser.add_argument('--seed', type=int, default=1124)
    parser.add_argument('--keep', action='store_true',
                        help='leave the box running (its state directory '
                             'is printed)')
    args = parser.parse_args(argv)
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
