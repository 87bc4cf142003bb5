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

"""The two-service cluster box: its API client, its services, its faults.

``tools/stack.sh up --db mariadb --coordination etcd --etcd-members 3
--volume-services 2`` driven from Python (:class:`ClusterBox`), for
``tests/functional/test_cluster.py``, ``tools/soak.py`` and
``tools/db_proof.py``.
"""

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import urllib.error
import urllib.request

from cinder_forcedetach.conformance import initiator
from devbox import partitions as devbox_partitions
from devbox import process
from devbox.services import cinder as cinder_service
from devbox.services import etcd as etcd_service
from devbox.services import tgtd
from tests import fakes
from tests.support import waiting

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
STACK_SH = os.path.join(REPO, 'tools', 'stack.sh')
DRIVER = 'tests.functional.faulty_driver.FaultyTgtISCSIDriver'
IQN = 'iqn.2026-11.org.cinder-forcedetach.cluster:'
READY_LINE = 'Driver post RPC initialization completed successfully'


class ApiError(Exception):
    def __init__(self, status, body):
        super(ApiError, self).__init__('%s: %s' % (status, body[:500]))
        self.status = status
        self.body = body


def reason_of(body):
    """The message of an API error body, without ids."""
    try:
        message = list(json.loads(body).values())[0]['message']
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        message = body
    return re.sub(r'[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}', 'ID',
                  message)[:160]


class ClusterBox(object):
    """The box of this module: its state directory, API and processes."""

    def __init__(self):
        self.state = tempfile.mkdtemp(prefix='cfd-cluster-')
        extra = os.path.join(self.state, 'extra.conf')
        with open(extra, 'w') as f:
            # A call whose volume service died answers within this time.
            f.write('[DEFAULT]\nrpc_response_timeout = 30\n'
                    # The tests and the soak create many volumes.
                    'quota_volumes = 200\nquota_gigabytes = 2000\n')
        self.env = fakes.box_env(self.state, glance=True, db='mariadb',
                                 etcd=True, etcd_members=3)
        self.env.update({
            'STACK_BACKENDS': 'tgt=' + DRIVER,
            'STACK_VOLUME_SERVICES': '2',
            'STACK_EXTRA_CONF': extra,
            # The volume services import the faulty driver from the tree.
            'PYTHONPATH': REPO + (':' + os.environ['PYTHONPATH']
                                  if os.environ.get('PYTHONPATH') else ''),
        })
        self.outputs = []
        self.partitions = None      # made by the first cut()

    def stack(self, *args, timeout=900, env=None):
        res = subprocess.run([STACK_SH] + list(args),
                             env=dict(self.env, **(env or {})),
                             capture_output=True, text=True, timeout=timeout)
        self.outputs.append(res.stdout + res.stderr)
        return res

    def up(self):
        """``up``; once the box has run, without the install step again."""
        res = self.stack('up', env={'STACK_SKIP_INSTALL': '1'}
                         if hasattr(self, 'info') else None)
        if res.returncode:
            raise AssertionError('stack up failed:\n' + res.stderr[-4000:])
        with open(os.path.join(self.state, 'stack.json')) as f:
            self.info = json.load(f)
        return res

    def down(self):
        if self.partitions is not None:
            self.partitions.close()
        self.stack('down', timeout=300)
        shutil.rmtree(self.state, ignore_errors=True)

    # -- processes ----------------------------------------------------------

    def record(self, name):
        try:
            with open(os.path.join(self.state, 'run', name + '.json')) as f:
                return json.load(f)
        except OSError:
            return None

    def alive(self, name):
        rec = self.record(name)
        return bool(rec) and process.is_alive(rec['pid'],
                                              rec['start_time'])

    def kill(self, name):
        """SIGKILL the box's process *name*; back once it is dead."""
        os.kill(self.record(name)['pid'], signal.SIGKILL)
        waiting.wait_for(lambda: not self.alive(name), 30,
                         '%s to die' % name)

    def volume_services(self):
        return ['cinder-volume-1', 'cinder-volume-2']

    def ready_count(self, name):
        try:
            with open(os.path.join(self.state, 'logs', name + '.log')) as f:
                return f.read().count(READY_LINE)
        except OSError:
            return 0

    def restart_dead(self, killed=None):
        """``up`` again; wait until every restarted service is ready.

        *killed*: the pid a fault point fired in (:meth:`fired_pid`); its
        service is first waited dead (:meth:`wait_killed`), or this could
        find it still alive and restart nothing.
        """
        if killed is not None:
            self.wait_killed(killed)
        before = {n: self.ready_count(n) for n in self.volume_services()}
        dead = [n for n in self.volume_services() if not self.alive(n)]
        self.up()
        waiting.wait_for(
            lambda: all(self.ready_count(n) > before[n] for n in dead),
            120, 'restarted %s ready' % dead)
        return dead

    def wait_killed(self, pid, timeout=30):
        """Wait until the volume service a fault point killed is dead.

        The fault hook names the service (``fired.<pid>``) before it sends
        the SIGKILL, and a killed process is still running to
        :meth:`alive` (and to ``up``) until the kernel has torn it down,
        which on a loaded machine takes a while.  Returns its name.
        """
        name = self.volume_service_of(pid)
        waiting.wait_for(lambda: not self.alive(name), timeout,
                         '%s (pid %d) to die' % (name, pid))
        return name

    def volume_service_logs(self):
        """The volume services' logs, one text."""
        text = []
        for path in sorted(glob.glob(os.path.join(
                self.state, 'logs', 'cinder-volume-*.log'))):
            with open(path) as f:
                text.append(f.read())
        return ''.join(text)

    def volume_service_of(self, pid):
        """The volume service whose process tree runs *pid*."""
        for name in self.volume_services():
            record = self.record(name)
            if record and (pid == record['pid'] or pid in [
                    p for p, _start in process.descendants(record['pid'])]):
                return name
        raise AssertionError('pid %d runs no volume service of the box' %
                             pid)

    def service_ports(self, *services):
        """The ports a volume service reaches *services* on.

        ``etcd`` (the gateway tooz talks to), ``db`` (MariaDB),
        ``rabbitmq`` (AMQP).
        """
        keys = {'etcd': 'etcd_port', 'db': 'db_port',
                'rabbitmq': 'rabbit_port'}
        return [self.info[keys[s]] for s in services]

    def cut(self, name, *services):
        """Cut volume service *name* off *services*; returns its healer.

        The box starts each volume service in a cgroup of its own; what
        that group sends to those services' ports is dropped
        (:mod:`devbox.partitions`): connections hang, nothing is refused.
        Healing twice is healing once.
        """
        if self.partitions is None:
            self.partitions = devbox_partitions.Partitions(
                cinder_service.group_tag(self.state))
        self.partitions.cut(name, self.service_ports(*services))
        return lambda: self.partitions.heal(name)

    # -- etcd (3 members behind a gateway) ---------------------------------

    def etcd_members(self):
        """{process name: client URL} of the box's etcd members."""
        host = self.info['host']
        return {name: 'http://%s:%d' % (host, port)
                for name, port in etcd_service.members(self.info)}

    def etcd_leader(self):
        """The process name of the member the others follow, or None."""
        for name, url in self.etcd_members().items():
            if not self.alive(name):
                continue
            try:
                status = json.loads(urllib.request.urlopen(
                    urllib.request.Request(
                        url + '/v3/maintenance/status', data=b'{}',
                        method='POST'), timeout=3).read())
            except OSError:
                continue
            if status.get('leader') and status['leader'] == status.get(
                    'header', {}).get('member_id'):
                return name
        return None

    # -- faults -------------------------------------------------------------

    def arm(self, point):
        """Arm *point*; :meth:`fired_pid` then answers for this one only."""
        self.disarm()
        faults = os.path.join(self.state, 'cinder', 'faults')
        os.makedirs(faults, exist_ok=True)
        with open(os.path.join(faults, 'armed.tmp'), 'w') as f:
            f.write(point)
        os.rename(os.path.join(faults, 'armed.tmp'),
                  os.path.join(faults, 'armed'))

    def disarm(self):
        faults = os.path.join(self.state, 'cinder', 'faults')
        for path in glob.glob(os.path.join(faults, '*')):
            os.unlink(path)

    def fired_pid(self):
        found = glob.glob(os.path.join(self.state, 'cinder', 'faults',
                                       'fired.*'))
        return int(found[0].rsplit('.', 1)[1]) if found else None

    def paused_pid(self):
        """The pid of the process a ``pause`` fault point holds."""
        (paused,) = glob.glob(os.path.join(self.state, 'cinder', 'faults',
                                           'paused.*'))
        return int(paused.rsplit('.', 1)[1])

    # -- the API (noauth, admin) --------------------------------------------

    def api(self, method, path, body=None, version='3.70', timeout=120):
        info = self.info
        url = 'http://%s:%d/v3/%s%s' % (info['host'], info['api_port'],
                                        info['project_id'], path)
        req = urllib.request.Request(
            url, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={'X-Auth-Token': 'admin:%s' % info['project_id'],
                     'Content-Type': 'application/json',
                     'OpenStack-API-Version': 'volume %s' % version})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                data = resp.read()
        except urllib.error.HTTPError as err:
            raise ApiError(err.code, err.read().decode(errors='replace'))
        return json.loads(data) if data else {}

    def volume(self, vol_id):
        return self.api('GET', '/volumes/%s' % vol_id)['volume']

    def wait_volume(self, vol_id, status, timeout=120):
        waiting.wait_for(
            lambda: self.volume(vol_id)['status'] == status, timeout,
            'volume %s %s' % (vol_id, status))

    def create_volume(self, multiattach=False, image_id=None):
        body = {'volume': {'size': 1, 'volume_type':
                           'multiattach' if multiattach else 'tgt'}}
        if image_id:
            body['volume']['imageRef'] = image_id
        vol = self.api('POST', '/volumes', body)['volume']
        self.wait_volume(vol['id'], 'available')
        return vol['id']

    def upload_image(self, data, disk_format='raw'):
        """An active image in the box's glance (no auth); returns its id."""
        images = 'http://%s:%d/v2/images' % (self.info['host'],
                                             self.info['glance_port'])
        req = urllib.request.Request(images, method='POST', data=json.dumps({
            'name': 'cluster-%d' % len(data), 'disk_format': disk_format,
            'container_format': 'bare'}).encode(),
            headers={'Content-Type': 'application/json'})
        with urllib.request.urlopen(req, timeout=30) as resp:
            image_id = json.loads(resp.read())['id']
        req = urllib.request.Request(
            '%s/%s/file' % (images, image_id), method='PUT', data=data,
            headers={'Content-Type': 'application/octet-stream'})
        urllib.request.urlopen(req, timeout=120).close()
        return image_id

    def volume_bytes(self, vol_id, length):
        """The first *length* bytes of the volume's file on the backend."""
        path = os.path.join(self.state, 'volumes', 'tgt', 'volume-' + vol_id)
        with open(path, 'rb') as f:
            return f.read(length)

    def attach(self, vol_id, host):
        """Attach a host (no instance: the box has no Nova to ask).

        Returns (attachment id, connection data).
        """
        att = self.api('POST', '/attachments', {'attachment': {
            'volume_uuid': vol_id, 'connector': connector(host),
            'mode': 'rw'}})['attachment']
        self.api('POST', '/attachments/%s/action' % att['id'],
                 {'os-complete': None})
        return att['id'], att['connection_info']

    def attachments(self, vol_id):
        return self.api('GET', '/attachments?volume_id=%s' % vol_id)[
            'attachments']

    def manage(self, *args):
        """The cinder-forcedetach CLI as an operator runs it."""
        env = dict(self.env)
        listed = self.stack('env').stdout
        for key, value in re.findall(r'^export (\w+)=(\S+)$', listed,
                                     re.MULTILINE):
            if key != 'PATH':
                env[key] = value
        cli = os.path.join(self.info['venv'], 'bin', 'cinder-forcedetach')
        res = subprocess.run([cli] + list(args), env=env,
                             capture_output=True, text=True, timeout=300)
        self.outputs.append(res.stdout + res.stderr)
        return res

    # -- the backend --------------------------------------------------------

    def targets(self):
        """{target name: set of initiator ACLs} of the box's tgtd."""
        out = tgtd.tgtadm(self.info['tgt_control_port'], '--op',
                          'show', '--mode', 'target').stdout
        found, name, in_acl = {}, None, False
        for line in out.splitlines():
            match = re.match(r'^Target \d+: (\S+)$', line)
            if match:
                name, in_acl = match.group(1), False
                found[name] = set()
            elif line.strip() == 'ACL information:':
                in_acl = True
            elif in_acl and line.startswith('        ') and name:
                found[name].add(line.strip())
        return found

    def target_of(self, vol_id):
        return {n: acls for n, acls in self.targets().items()
                if n.endswith('volume-' + vol_id)}


def connector(host):
    return {'host': host, 'initiator': IQN + host, 'ip': '127.0.0.1',
            'platform': 'x86_64', 'os_type': 'linux', 'multipath': False}


def login(data, host):
    return initiator.QemuIoInitiator(
        data['target_portal'], data['target_iqn'], IQN + host,
        data.get('auth_username'), data.get('auth_password'),
        lun=data['target_lun'])
