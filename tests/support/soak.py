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

"""The soak on the clustered box: its operations, writers and checks.

Run by ``tools/soak.py`` (see there) and by ``test_cluster``'s history
run.
"""

import collections
import concurrent.futures
import contextlib
import json
import random
import threading
import time

from cinder_forcedetach.conformance import initiator
from tests.support import cluster as tc
from tests.support import history as hist

HOSTS = ['soak-h%d' % i for i in range(1, 5)]
TRANSITIONS = ('attaching', 'detaching', 'reserved', 'creating', 'deleting')
#: Each host's writes: 4 KiB of its own byte.
PATTERNS = {host: 0x31 + i for i, host in enumerate(HOSTS)}
BLOCK = 4096
#: The first slot a writer writes (the first 64 KiB stay untouched).
FIRST_SLOT = 16
#: Seconds between two writes of a writer, and a write's timeout.
WRITE_INTERVAL = 0.2
WRITE_TIMEOUT = 3
#: Outcomes of a write that is over (any other may still be pending).
ANSWERED = (initiator.Outcome.WROTE, initiator.Outcome.IO_ERROR,
            initiator.Outcome.LOGIN_REFUSED, initiator.Outcome.PROCESS_GONE)
#: Where a force-detach's volume service is SIGKILLed (--faults).
KILL_POINTS = ('after:ResolveAttachmentsTask', 'after:RecordTeardownTask',
               'after:RevokeHostAccessTask', 'after:RemoveExportTask',
               'after:terminate_connection')
#: What a partition cuts a volume service off (--faults): the lock
#: service, the database, the message broker, or all three.
CUTS = (('etcd',), ('db',), ('rabbitmq',), ('etcd', 'db', 'rabbitmq'))
#: How long a partition holds (seconds): the lock's 10 s lease lies inside.
CUT_SECONDS = (2, 15)


class Writer(threading.Thread):
    """One host's live initiator on a volume, writing slot after slot.

    It keeps writing after its host is cut (that is what is checked: a cut
    initiator's writes must not land), until the run ends or the same host
    is attached to the volume again (a new writer then).
    """

    def __init__(self, soak, vol_id, host, data):
        super(Writer, self).__init__(daemon=True)
        self.soak, self.vol_id, self.host = soak, vol_id, host
        self.session = tc.login(data, host)
        self.stopped = threading.Event()

    def run(self):
        history = self.soak.history
        while not self.stopped.is_set() and self.session.alive:
            slot = self.soak.next_slot(self.vol_id)
            start = history.now()
            outcome = self.session.try_write(
                PATTERNS[self.host], slot * BLOCK, BLOCK,
                timeout=WRITE_TIMEOUT)
            # A write without an answer is still pending in qemu-io (and
            # may land later): its end is unknown.
            end = history.now() if outcome.kind in ANSWERED else \
                float('inf')
            history.write(self.host, self.vol_id, slot, start, end,
                          outcome.kind)
            self.stopped.wait(WRITE_INTERVAL)

    def stop(self):
        self.stopped.set()
        if self.ident is not None:      # started
            self.join(WRITE_TIMEOUT + 5)
        self.session.close()


#: Correct answers to an operation another one raced, in an API error's
#: body (Cinder's attachment update reports any backend error as 500).
REFUSALS = (
    # Our driver: it will not grant a host whose access a force-detach ended.
    'a force-detach ended it',
    # Cinder: the attachment being created was ended meanwhile (a delete or
    # force-detach of its volume between the reserve and the update).
    'Volume attachment could not be found',
)


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
        self.history = hist.History() if args.history else None
        self.writers = {}           # (volume, host) -> Writer
        self.slots = collections.Counter()
        self.crashing = threading.Lock()
        # Volumes an operator's status-only reset left with attachments
        # Cinder no longer counts: their ACLs may hold fewer hosts.
        self.reset = set()
        #: (start, end) of each kill -9 and restart: a call that failed
        #: with a 500 meanwhile lost its volume service.
        self.fault_windows = []

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

    def next_slot(self, vol_id):
        with self.lock:
            self.slots[vol_id] += 1
            return FIRST_SLOT + self.slots[vol_id] - 1

    def recorded(self, kind, vol_id, **fields):
        """The history's record of an operation, or a no-op without one."""
        if self.history is None:
            return contextlib.nullcontext({})
        return self.history.op(kind, vol_id, **fields)

    # -- operations ---------------------------------------------------------

    def attach(self):
        """As Nova attaches: reserve, update with the connector, complete.

        A failed update or os-complete is followed by the attachment's
        delete, as Nova cleans up a failed attach; the error counted is
        the first.  The reservation's id is known before the update, so an
        update that fails (a 500 while a fault runs) leaves no attachment
        the run cannot name.  With a history, the host's initiator logs in
        and writes.
        """
        vol_id, host = self.pick(), self.rng.choice(HOSTS)
        with self.recorded('attach', vol_id, host=host) as op:
            try:
                att = self.box.api('POST', '/attachments', {'attachment': {
                    'volume_uuid': vol_id, 'mode': 'rw'}})['attachment']
            except tc.ApiError:
                op['outcome'] = 'fail'
                raise
            op['attachment'] = att['id']
            with self.lock:
                self.hosts[att['id']] = host
            try:
                att = self.box.api('PUT', '/attachments/%s' % att['id'], {
                    'attachment': {'connector': tc.connector(host)}})[
                        'attachment']
                self.box.api('POST', '/attachments/%s/action' % att['id'],
                             {'os-complete': None})
            except tc.ApiError:
                try:
                    self.box.api('DELETE', '/attachments/%s' % att['id'])
                except tc.ApiError:
                    pass        # already ended by a force-detach
                raise
        if self.history is not None:
            self.start_writer(vol_id, host, att['connection_info'])

    def start_writer(self, vol_id, host, info):
        data = info if 'target_iqn' in info else info['data']
        writer = Writer(self, vol_id, host, data)
        writer.start()
        with self.lock:
            old = self.writers.get((vol_id, host))
            self.writers[(vol_id, host)] = writer
        if old is not None:
            old.stop()

    def delete_attachment(self):
        vol_id = self.pick()
        live = [a['id'] for a in self.box.attachments(vol_id)]
        if live:
            att_id = self.rng.choice(live)
            with self.recorded('delete_attachment', vol_id,
                               attachment=att_id):
                self.box.api('DELETE', '/attachments/%s' % att_id)

    def named_host(self, vol_id):
        """``(attachment, connector)`` of one host when several are attached.

        ``(None, None)`` with one attachment or none: the force-detach then
        names no host, as an operator's would.
        """
        live = self.box.attachments(vol_id)
        with self.lock:
            known = [a['id'] for a in live if a['id'] in self.hosts]
            if len(live) > 1 and known:
                att_id = self.rng.choice(known)
                return att_id, tc.connector(self.hosts[att_id])
        return None, None

    def force_detach_api(self):
        """os-force_detach; the host named when several are attached.

        Without a connector, our driver refuses a volume with several live
        attachments (which host leaves is unknown) and Cinder answers 500;
        an attach that raced the listing earns that refusal.
        """
        vol_id = self.pick()
        with self.lock:
            multiattach = self.volumes.get(vol_id)
        att_id, connector = self.named_host(vol_id)
        self.local.rerun = detach_args(vol_id, att_id, connector)
        body = {'attachment_id': att_id, 'connector': connector} \
            if att_id else {}
        with self.recorded('force_detach', vol_id,
                           attachment=body.get('attachment_id')):
            try:
                self.box.api('POST', '/volumes/%s/action' % vol_id,
                             {'os-force_detach': body})
            except tc.ApiError as err:
                err.refused = (err.status == 500 and multiattach and
                               'connector' not in body)
                raise

    def reset_status(self):
        """The operator's status-only reset of an in-use volume (--faults).

        Horizon's "Update Volume Status": Cinder's status alone becomes
        available, its attachments stay; the next attach of another host
        meets our grant fence.
        """
        vol_id = self.pick()
        if self.box.volume(vol_id)['status'] != 'in-use':
            return
        with self.lock:
            self.reset.add(vol_id)
        with self.recorded('reset_status', vol_id):
            self.box.api('POST', '/volumes/%s/action' % vol_id,
                         {'os-reset_status': {'status': 'available'}})

    def crash(self):
        """A force-detach whose volume service is SIGKILLed (--faults).

        At a random step of the flow; the service is restarted and the
        force-detach run again through the CLI.  One at a time.
        """
        if not self.crashing.acquire(blocking=False):
            return
        try:
            vol_id, point = self.pick(), self.rng.choice(KILL_POINTS)
            start = self.history.now()
            self.box.arm(point)
            with self.recorded('force_detach', vol_id, fault=point) as op:
                try:
                    self.box.api('POST', '/volumes/%s/action' % vol_id,
                                 {'os-force_detach': {}}, timeout=60)
                except (tc.ApiError, OSError):
                    op['outcome'] = 'info'      # its service was killed
                finally:
                    fired = self.box.fired_pid()
                    self.box.disarm()
                    if fired is not None:
                        self.box.restart_dead(killed=fired)
            self.record_fault('kill -9', start, point=point,
                              fired=fired is not None)
            with self.recorded('force_detach', vol_id):
                res = self.box.manage(*detach_args(vol_id))
                if res.returncode:
                    raise CliFailed(res.returncode)
        finally:
            self.crashing.release()

    def record_fault(self, kind, start, **fields):
        """A fault from *start* to now: in the history, and its window.

        A call that failed with a 500 within the window is the fault's.
        """
        end = self.history.now()
        with self.lock:
            self.fault_windows.append((start, end))
        self.history.fault(kind, start, end, **fields)

    def etcd_leader_down(self):
        """The etcd leader SIGKILLed while the calls go on (--faults).

        The two other members keep the quorum: they elect a leader, leases
        survive, Cinder's gateway moves to a member that answers.  The
        member is started again after 2-8 s.  One fault at a time (with
        :meth:`crash`): a call that failed with a 500 meanwhile is the
        fault's, not a finding.
        """
        if not self.crashing.acquire(blocking=False):
            return
        try:
            leader = self.box.etcd_leader()
            if leader is None:
                return
            start = self.history.now()
            self.box.kill(leader)
            time.sleep(self.rng.uniform(2, 8))
            self.box.up()
            self.record_fault('etcd leader kill -9', start, member=leader,
                              fired=True)
        finally:
            self.crashing.release()

    def partition(self):
        """A volume service cut off etcd, MariaDB, RabbitMQ or all (--faults).

        Whatever it is doing: the calls go on at their rate and those it
        serves hang.  Held 2-15 s (past the lock's lease or not), then
        healed.  One fault at a time (with :meth:`crash`).
        """
        if not self.crashing.acquire(blocking=False):
            return
        try:
            name = self.rng.choice(self.box.volume_services())
            cut = self.rng.choice(CUTS)
            start = self.history.now()
            heal = self.box.cut(name, *cut)
            try:
                time.sleep(self.rng.uniform(*CUT_SECONDS))
            finally:
                heal()
            self.record_fault('partition', start, service=name,
                              cut='+'.join(cut), fired=True)
        finally:
            self.crashing.release()

    def run_again(self):
        """The operator's re-run of a force-detach a fault made fail.

        Once the fault is over, through the CLI, of the same host (or of
        every host): a flow that stopped half-way (its service killed, or
        its lock's lease lost) left what it tore down torn down and
        Cinder's rows as they were; the re-run converges.
        """
        with self.crashing:
            pass            # the fault is over
        args = self.local.rerun
        with self.recorded('force_detach', args[2]):
            res = self.box.manage(*args)
        if res.returncode:
            raise CliFailed(res.returncode)

    def force_detach_cli(self):
        """The CLI: every host, or one host when several are attached."""
        vol_id = self.pick()
        att_id, connector = self.named_host(vol_id)
        args = detach_args(vol_id, att_id, connector, every=False)
        self.local.rerun = detach_args(vol_id, att_id, connector)
        with self.recorded('force_detach', vol_id, attachment=att_id):
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
    #: With a history: no churn (a deleted volume's writes cannot be read).
    HISTORY_OPERATIONS = (('attach', 40), ('delete_attachment', 25),
                          ('force_detach_api', 15), ('force_detach_cli', 10))
    FAULTS = (('crash', 2), ('reset_status', 4), ('etcd_leader_down', 1),
              ('partition', 2))

    def in_fault(self, start):
        """Whether a fault was under way since *start*."""
        with self.lock:
            return self.crashing.locked() or any(
                end > start for _s, end in self.fault_windows)

    def one(self, name):
        self.local.picked = []
        # What a fault that fails this force-detach makes run again (its
        # CLI arguments, set just before its call).
        self.local.rerun = None
        start = time.monotonic()
        try:
            self.attempt(name, start)
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

    def attempt(self, name, start):
        """Operation *name*; a force-detach a fault made fail runs again.

        An API error is counted by kind: a refusal of a call that raced
        another, a 500 while a fault ran (the fault's), or a 500 (a
        finding).
        """
        try:
            getattr(self, name)()
        except (tc.ApiError, CliFailed) as err:
            api = isinstance(err, tc.ApiError)
            # The whole body: the refusal comes after 160 characters.
            refused = api and (getattr(err, 'refused', False) or any(
                reason in err.body for reason in REFUSALS))
            faulted = not refused and self.in_fault(start) and (
                not api or err.status >= 500)
            if api:
                with self.lock:
                    self.errors['%s %s%s' % (
                        name, err.status, ' refused' if refused else
                        ' during a fault' if faulted else '')] += 1
                    if err.status >= 500 and not refused and not faulted:
                        self.http500 += 1
                        print('500 on %s: %s' % (
                            name, tc.reason_of(err.body)), flush=True)
            if faulted and self.local.rerun:
                self.run_again()
            if not api:
                raise

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
                listed = self.box.attachments(vol_id)
                read = time.monotonic()
                attached = [a for a in listed if a['status'] == 'attached']
                targets = self.box.target_of(vol_id)
            except tc.ApiError:
                continue    # deleted under us
            acls = set().union(*targets.values()) if targets else set()
            with self.lock:
                settled = (self.started[vol_id] == generation and
                           not self.busy[vol_id])
                hosts = {self.hosts[a['id']] for a in listed
                         if a['id'] in self.hosts and
                         a['status'] != 'detached'}
                reset = vol_id in self.reset
            if self.history is not None:
                self.history.observe(vol_id, read, status, hosts,
                                     bool(targets), acls, settled and
                                     status not in TRANSITIONS)
            if status in TRANSITIONS:
                continue
            with self.lock:
                if not settled:
                    continue        # a call began while we read
                wanted = {tc.IQN + self.hosts[a['id']] for a in attached
                          if a['id'] in self.hosts}
                # An attach on its way may hold its grant before it completes.
                allowed = wanted | {tc.IQN + self.hosts[a['id']]
                                    for a in listed if a['id'] in self.hosts}
            if reset:
                # The reset left attachments our grant fence cut: fewer
                # hosts on the ACL than attached is what it should be.
                wanted = set()
            problems = []
            if status == 'available' and targets and not (
                    self.history is not None and hist.left_by_a_reset(
                        self.history.events, vol_id, read)):
                problems.append('available with a target %s' % acls)
            elif status != 'available' and not wanted <= acls <= allowed:
                problems.append('ACLs %s, attached hosts %s' % (
                    sorted(acls), sorted(wanted)))
            if not multi and len(attached) > 1 and not reset:
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
        operations = self.OPERATIONS
        if self.history is not None:
            operations = self.HISTORY_OPERATIONS + (
                self.FAULTS if self.args.faults else ())
        names = [n for n, w in operations for _ in range(w)]
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
        try:
            found = self.check_history() if self.history is not None \
                else []
        finally:
            self.stop_writers()     # no initiator outlives the run
        print('soak: minutes %s, operations %d, errors %s, http 500: %d, '
              'invariant checks %d, violations %d%s' % (
                  self.args.minutes, self.ops, dict(self.errors),
                  self.http500, self.checks, len(self.violations),
                  self.history_summary(found)), flush=True)
        return 0 if not (self.violations or self.http500 or found) else 1

    # -- the history ----------------------------------------------------------

    def stop_writers(self):
        """Stop every writer and close its initiator (idempotent)."""
        with self.lock:
            writers = list(self.writers.values())
        for writer in writers:
            writer.stopped.set()
        for writer in writers:
            writer.stop()

    def check_history(self):
        """Stop the writers; check the history against the volumes."""
        self.stop_writers()
        self.history.dump(self.args.history)
        landed, final = {}, {}
        for vol_id in self.volumes:
            slots = self.slots[vol_id]
            data = self.box.volume_bytes(vol_id,
                                         (FIRST_SLOT + slots) * BLOCK)
            landed[vol_id] = landed_slots(data, slots)
            final[vol_id] = [a['id'] for a in self.box.attachments(vol_id)
                             if a['status'] != 'detached']
        found = hist.check(self.history.events, landed, self.volumes, final)
        for violation in found:
            print('HISTORY VIOLATION %s %s: %s' % violation, flush=True)
        self.landed = landed
        return found

    def history_summary(self, found):
        if self.history is None:
            return ''
        events = self.history.events
        writes = [e for e in events if e['type'] == 'write']
        return ('; history %s: %d events, %d writes (%d landed), %d faults, '
                'checker violations %d' % (
                    self.args.history, len(events), len(writes),
                    sum(len(v) for v in self.landed.values()),
                    sum(e['type'] == 'fault' for e in events), len(found)))


def detach_args(vol_id, att_id=None, connector=None, every=True):
    """The CLI's force-detach of the host named, else of every host.

    *every*: say so (``--all-hosts``), which a volume with several
    attachments needs; without it the CLI refuses such a volume.
    """
    args = ['volume', 'force-detach', vol_id]
    if att_id:
        return args + ['--attachment', att_id, '--connector',
                       json.dumps(connector)]
    return args + ['--all-hosts'] if every else args


def landed_slots(data, slots):
    """``{slot: host}`` of the slots that hold a host's whole pattern."""
    owner = {bytes([p]) * BLOCK: host for host, p in PATTERNS.items()}
    landed = {}
    for slot in range(FIRST_SLOT, FIRST_SLOT + slots):
        host = owner.get(data[slot * BLOCK:(slot + 1) * BLOCK])
        if host is not None:
            landed[slot] = host
    return landed


class CliFailed(Exception):
    def __init__(self, code):
        super(CliFailed, self).__init__('exit %d' % code)
        self.code = code
