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

"""Smoke test of ``tools/stack.sh``: real Cinder processes, end to end.

``tools/stack.sh up`` (with its install step) in a private state directory
on free loopback ports; the client command it prints creates a volume;
python-cinderclient attaches it; a live qemu-io initiator logs in; the
``cinder-forcedetach`` CLI force-detaches it, which the volume service
notifies (``forcedetach.detach.forced``, reason ``operator``, read from
the box's RabbitMQ with kombu) and counts in its pool capabilities
(``get_pools?detail=True``); ``down`` must leave none of the processes
``up`` started.  Skipped only when rabbitmq-server cannot be
installed (the reason is printed).

With Ceph's Python bindings in the venv (``tools/install-ceph.sh``, which
README's test command runs) the same stack also has an ``rbd`` backend on
its own single-node Ceph: a volume of that type attaches with the
monitor's address and no key in its connection_info, force-detaches, and
``down`` stops the Ceph daemons too.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import kombu
import testtools

from cinder_forcedetach.conformance import initiator as qemu_io
from devbox import process
from tests import fakes
from tests.support import cutoff
from tests.support import waiting

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
STACK_SH = os.path.join(REPO, 'tools', 'stack.sh')
RABBITMQ = '/usr/lib/rabbitmq/bin/rabbitmq-server'
HOST = 'stack-compute1'
#: Where the box's Cinder sends its notifications: oslo.messaging's
#: control_exchange (Cinder keeps the default) and the routing key of
#: topic ``notifications`` at priority info.
NOTIFY_EXCHANGE = 'openstack'
NOTIFY_KEY = 'notifications.info'
FORCED = 'forcedetach.detach.forced'
INITIATOR = 'iqn.2026-11.org.cinder-forcedetach.test:' + HOST


def _venv_has_ceph():
    venv = os.environ.get('STACK_VENV') or os.path.join(REPO, '.venv')
    return subprocess.run([os.path.join(venv, 'bin', 'python'), '-c',
                           'import rados, rbd'],
                          capture_output=True).returncode == 0


def _running(pid):
    """Whether *pid* runs (a zombie waiting for its reaper does not)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


class StackSmokeTestCase(testtools.TestCase):

    def setUp(self):
        super(StackSmokeTestCase, self).setUp()
        self.state = tempfile.mkdtemp(prefix='cfd-stack-')
        self.env = fakes.box_env(self.state, ceph=True)
        self.with_ceph = _venv_has_ceph()
        if self.with_ceph:
            self.env['STACK_BACKENDS'] = 'tgt,rbd'
        else:
            sys.stderr.write('test_stack: no rados/rbd in the venv: the '
                             'stack runs without its rbd backend\n')
        for var in ('CINDER_ENDPOINT', 'CINDERCLIENT_BYPASS_URL',
                    'OS_AUTH_TYPE', 'OS_PROJECT_ID', 'OS_AUTH_URL',
                    'OS_USER_ID', 'OS_VOLUME_API_VERSION'):
            self.env.pop(var, None)
        self.sessions = []
        self.addCleanup(shutil.rmtree, self.state, True)
        self.addCleanup(self._down_quietly)
        self.addCleanup(self._close_sessions)

    def _close_sessions(self):
        for session in self.sessions:
            session.close()

    def _down_quietly(self):
        subprocess.run([STACK_SH, 'down'], env=self.env,
                       capture_output=True, timeout=180)

    def stack(self, *args, timeout=600):
        return subprocess.run([STACK_SH] + list(args), env=self.env,
                              capture_output=True, text=True,
                              timeout=timeout)

    def shell(self, command, env=None):
        """Run a printed command line as a user pastes it."""
        return subprocess.run(['bash', '-c', command], env=env or self.env,
                              capture_output=True, text=True, timeout=120)

    def recorded_processes(self):
        """(name, pid, start time) of what `up` started, and children."""
        found = []
        run_dir = os.path.join(self.state, 'run')
        for name in sorted(os.listdir(run_dir)):
            with open(os.path.join(run_dir, name)) as f:
                rec = json.load(f)
            found.append((rec['name'], rec['pid'], rec['start_time']))
            found += [(rec['name'] + ' child', pid, start) for pid, start
                      in process.descendants(rec['pid'])]
        return found

    def test_up_create_force_detach_down(self):
        up = self.stack('up')
        if up.returncode and not os.path.exists(RABBITMQ):
            why = ('rabbitmq-server cannot be installed here: %s' %
                   (up.stderr.strip().splitlines() or ['?'])[-1])
            sys.stderr.write('test_stack: SKIP: %s\n' % why)
            self.skipTest(why)
        self.assertEqual(0, up.returncode, up.stderr[-3000:])
        lines = up.stdout.splitlines()
        create = lines[lines.index('Create a volume:') + 1].strip()
        force = lines[lines.index('Force-detach it from every host:') +
                      1].strip()
        audit = lines[lines.index('Audit what Cinder and the backends say '
                                  '(on this host; --fix repairs):') +
                      1].strip()
        self.assertIn('OS_AUTH_TYPE=noauth', create)
        procs = self.recorded_processes()
        self.assertEqual(
            {'epmd', 'rabbitmq', 'mariadb', 'tgtd', 'cinder-scheduler',
             'cinder-volume', 'cinder-api'},
            {name for name, _p, _s in procs if ' ' not in name})

        status = self.stack('status')
        self.assertEqual(0, status.returncode, status.stdout)

        # The pasted client command creates a volume.
        created = self.shell(create)
        self.assertEqual(0, created.returncode, created.stderr)
        volume_id = re.search(r'^\|\s+id\s+\|\s+(\S+)\s+\|',
                              created.stdout, re.MULTILINE).group(1)
        client_env = dict(self.env)
        for word in shlex.split(create):
            if re.match(r'^[A-Z_]+=', word):
                key, _sep, value = word.partition('=')
                client_env[key] = value
        cinder = create.split()[-3]
        self._wait_status(cinder, client_env, volume_id, 'available')

        # Attach it like Nova (python-cinderclient), and log in for real.
        manage = force.split(' volume force-detach')[0]
        attachment_id, data, _out = self.attach(cinder, client_env, manage,
                                                volume_id)
        masked = self.shell('%s attachment show %s' % (manage,
                                                       attachment_id))
        self.assertNotIn(data['auth_password'], masked.stdout)
        session = qemu_io.QemuIoInitiator(
            data['target_portal'], data['target_iqn'], INITIATOR,
            data['auth_username'], data['auth_password'],
            lun=data['target_lun'])
        self.sessions.append(session)
        # The control write, right before the teardown.
        control = cutoff.control_write(self, session, 0x5a)

        # Listen for the notifications before the teardown.
        notifications = self.notification_queue()
        before = self.forced_detaches('tgt')

        # The CLI force-detach, as printed.
        detached = self.shell(force.replace('VOLUME_ID', volume_id))
        self.assertEqual(0, detached.returncode, detached.stderr)
        self.assertRegex(detached.stdout, r'\|\s+status\s+\|\s+available')
        cutoff.assert_cut_off(self, session, os.path.join(
            self.state, 'volumes', 'tgt', 'volume-' + volume_id), 0xee,
            control=control)
        # Notified once, with names and ids only, and counted.
        sent = self.wait_notification(notifications, volume_id)
        self.assertEqual('operator', sent['payload']['reason'])
        self.assertEqual([attachment_id], sent['payload']['attachment_ids'])
        self.assertEqual([HOST], sent['payload']['hosts'])
        self.assertIn(INITIATOR, sent['payload']['initiators'])
        self.assertTrue(sent['publisher_id'].startswith('volume.'),
                        sent['publisher_id'])
        self.assertNotIn(data['auth_password'], json.dumps(sent))
        self.assertIn('0 target(s)', self.stack('status').stdout)
        # The audit, as printed, finds the box consistent.
        audited = self.shell(audit)
        self.assertEqual(0, audited.returncode, audited.stdout +
                         audited.stderr[-2000:])
        self.assertEqual(0, json.loads(audited.stdout)['summary']['found'])
        self._audit_repair_is_notified(create, client_env, cinder, audit,
                                       notifications)

        ceph_pids = []
        if self.with_ceph:
            ceph_pids = self._rbd_round_trip(cinder, client_env, manage)
        # Counted in the tgt pool: the volume service reports its stats
        # every minute, so this is asked last (the RBD round trip is
        # usually longer than the wait).
        self.wait_forced_detaches('tgt', before['operator'] + 1)

        # down stops every process up started, and nothing else.
        down = self.stack('down')
        self.assertEqual(0, down.returncode, down.stderr)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = [(n, p) for n, p, s in procs
                    if process.is_alive(p, s)]
            if not left:
                break
            time.sleep(0.2)
        self.assertEqual([], left)
        self.assertEqual([], os.listdir(os.path.join(self.state, 'run')))
        self.assertEqual([], [p for p in ceph_pids if _running(p)])
        self.assertEqual(3, self.stack('status').returncode)

    def _audit_repair_is_notified(self, create, client_env, cinder, audit,
                                  notifications):
        """An operator's reset-state found and repaired by the audit.

        Each finding, the repair (a forced detach of reason ``audit``) and
        the pass reach the bus: the command reads cinder.conf's
        notification driver, as the volume service does.
        """
        created = self.shell(create)
        self.assertEqual(0, created.returncode, created.stderr)
        stuck = re.search(r'^\|\s+id\s+\|\s+(\S+)\s+\|', created.stdout,
                          re.MULTILINE).group(1)
        self._wait_status(cinder, client_env, stuck, 'available')
        reset = subprocess.run(
            [cinder, 'reset-state', '--state', 'detaching', stuck],
            env=client_env, capture_output=True, text=True, timeout=120)
        self.assertEqual(0, reset.returncode, reset.stderr)
        repaired = self.shell(audit + ' --fix --grace 0')
        self.assertEqual(4, repaired.returncode, repaired.stdout +
                         repaired.stderr[-2000:])
        self.assertEqual({'stuck_transition': 1}, json.loads(
            repaired.stdout)['summary']['by case'])
        self._wait_status(cinder, client_env, stuck, 'available')
        # In the order sent: the repair's, then the findings', the pass's.
        forced = self.wait_notification(notifications, stuck)
        self.assertEqual('audit', forced['payload']['reason'])
        found = self.wait_notification(notifications, stuck,
                                       event='forcedetach.audit.finding')
        self.assertEqual(('stuck_transition', 'repaired'), (
            found['payload']['case'], found['payload']['result']))
        summary = self.wait_notification(notifications, None,
                                         event='forcedetach.audit.pass')
        self.assertEqual((1, True), (summary['payload']['repaired'],
                                     summary['payload']['fix']))

    def box_info(self, name):
        with open(os.path.join(self.state, name)) as f:
            return json.load(f)

    def notification_queue(self):
        """A queue of our own bound where Cinder's info notifications go.

        The exchange is the one Cinder's RPC servers declared (passive:
        declared as they declared it); the queue goes with the connection.
        """
        info, sec = self.box_info('stack.json'), self.box_info(
            'secrets.json')
        conn = kombu.Connection(
            hostname=info['host'], port=info['rabbit_port'],
            userid=sec['rabbit_user'], password=sec['rabbit_password'],
            virtual_host='/', transport='pyamqp', connect_timeout=10)
        self.addCleanup(conn.release)
        queue = kombu.Queue(
            'cfd-test-stack-%s' % uuid.uuid4().hex,
            kombu.Exchange(NOTIFY_EXCHANGE, type='topic', passive=True),
            routing_key=NOTIFY_KEY, exclusive=True, auto_delete=True)
        bound = queue(conn.channel())
        bound.declare()
        return bound

    def wait_notification(self, queue, volume_id, event=FORCED,
                          timeout=30):
        """The first *event* of *volume_id* (None: any) on *queue*, unwrapped.

        oslo.messaging's envelope is opened; the event type and volume of
        every notification read go into the failure text, never a payload
        (Cinder's own ``volume.detach.start`` carries the attachments'
        connection_info, CHAP password included).
        """
        seen = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = queue.get(no_ack=True)
            if message is None:
                time.sleep(0.2)
                continue
            body = message.payload
            if isinstance(body, (bytes, str)):
                body = json.loads(body)
            if 'oslo.message' in body:
                body = json.loads(body['oslo.message'])
            seen.append((body.get('event_type'),
                         (body.get('payload') or {}).get('volume_id')))
            if body.get('event_type') == event and volume_id in (
                    None, (body.get('payload') or {}).get('volume_id')):
                return body
        self.fail('no %s of volume %s on %s within %d s; read: %r' % (
            event, volume_id, NOTIFY_KEY, timeout, seen))

    def pools(self):
        info = self.box_info('stack.json')
        req = urllib.request.Request(
            'http://%s:%d/v3/%s/scheduler-stats/get_pools?detail=True' % (
                info['host'], info['api_port'], info['project_id']),
            headers={'X-Auth-Token': 'admin:%s' % info['project_id'],
                     'OpenStack-API-Version': 'volume 3.0'})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.load(resp)['pools']

    def forced_detaches(self, backend):
        """``forcedetach_forced_detaches`` of *backend*'s pool."""
        for pool in self.pools():
            if pool['name'].split('@', 1)[-1].split('#', 1)[0] == backend:
                caps = pool.get('capabilities') or {}
                self.assertIn('forcedetach_forced_detaches_total', caps)
                return caps['forcedetach_forced_detaches']
        self.fail('no pool of backend %s' % backend)

    def wait_forced_detaches(self, backend, operator, timeout=200):
        """Wait for the pool to show *operator* forced detaches.

        The volume service reports its stats every minute; the scheduler
        keeps the last report.
        """
        waiting.wait_for(
            lambda: self.forced_detaches(backend)['operator'] >= operator,
            timeout, 'pool capability forcedetach_forced_detaches of %s '
            'with %d operator' % (backend, operator), interval=2)
        self.assertEqual(operator, self.forced_detaches(backend)['operator'])

    def attach(self, cinder, env, manage, volume_id):
        """Attach as Nova does; (attachment id, connection_info, output).

        The connection_info is read back unmasked with ``attachment show
        --show-secrets``; the output is everything both commands printed.
        """
        attach = subprocess.run(
            [cinder, 'attachment-create', '--connect', 'True',
             '--initiator', INITIATOR, '--ip', '127.0.0.1', '--host', HOST,
             '--platform', 'x86_64', '--ostype', 'linux', volume_id],
            env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(0, attach.returncode, attach.stderr)
        attachment_id = re.search(r'^\|\s+id\s+\|\s+(\S+)\s+\|',
                                  attach.stdout, re.MULTILINE).group(1)
        shown = self.shell('%s --format json attachment show %s '
                           '--show-secrets' % (manage, attachment_id))
        self.assertEqual(0, shown.returncode, shown.stderr)
        return (attachment_id, json.loads(shown.stdout)['connection_info'],
                attach.stdout + shown.stdout)

    def ceph_daemon_pids(self):
        run = os.path.join(self.state, 'ceph', 'run')
        pids = []
        for name in sorted(os.listdir(run)):
            if name.endswith('.pid'):
                with open(os.path.join(run, name)) as f:
                    pids.append(int(f.read().strip()))
        return pids

    def _rbd_round_trip(self, cinder, env, manage):
        """A volume of the rbd type: attach, force-detach; Ceph's pids."""
        pids = self.ceph_daemon_pids()
        self.assertEqual(3, len(pids))
        status = self.stack('status')
        self.assertRegex(status.stdout, r'(?m)^ceph\s+running.*ready$')
        created = subprocess.run(
            [cinder, 'create', '--volume-type', 'rbd', '1'], env=env,
            capture_output=True, text=True, timeout=120)
        self.assertEqual(0, created.returncode, created.stderr)
        volume_id = re.search(r'^\|\s+id\s+\|\s+(\S+)\s+\|',
                              created.stdout, re.MULTILINE).group(1)
        self._wait_status(cinder, env, volume_id, 'available')
        _att, info, printed = self.attach(cinder, env, manage, volume_id)
        self.assertEqual('rbd', info['driver_volume_type'])
        self.assertEqual((['127.0.0.1'], [self.env['STACK_CEPH_MON_PORT']]),
                         (info['hosts'], info['ports']))
        self.assertEqual('volumes/volume-%s' % volume_id, info['name'])
        # No Ceph key anywhere: not in connection_info, not in cinder.conf.
        keyring = os.path.join(self.state, 'ceph',
                               'ceph.client.cinder.keyring')
        with open(keyring) as f:
            key = re.search(r'key\s*=\s*(\S+)', f.read()).group(1)
        with open(os.path.join(self.state, 'cinder.conf')) as f:
            conf = f.read()
        self.assertIn('forcedetach_rbd_keyring = %s' % keyring, conf)
        for text in (printed, conf):
            self.assertNotIn(key, text)

        detached = self.shell('%s volume force-detach %s' % (manage,
                                                             volume_id))
        self.assertEqual(0, detached.returncode, detached.stderr)
        self.assertRegex(detached.stdout, r'\|\s+status\s+\|\s+available')
        return pids

    def _wait_status(self, cinder, env, volume_id, status, timeout=60):
        def reached():
            res = subprocess.run([cinder, 'show', volume_id], env=env,
                                 capture_output=True, text=True, timeout=60)
            match = re.search(r'^\|\s+status\s+\|\s+(\S+)', res.stdout,
                              re.MULTILINE)
            return match and match.group(1) == status
        waiting.wait_for(reached, timeout,
                         'volume %s %s' % (volume_id, status), interval=0.5)
