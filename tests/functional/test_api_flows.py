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

"""The flows Nova and operators drive, through Cinder's real REST API.

Cinder's in-process harness (:mod:`tests.functional.base`) runs the real
WSGI API, scheduler and volume services with our tgt iSCSI driver on a real
tgtd; initiators are live qemu-io/libiscsi sessions.  Two small servers
stand in for what cannot run here, both on 127.0.0.1 and started by the
tests:

* :class:`MiniNova` answers what Cinder asks of Keystone and Nova: token
  validation with a catalog, ``GET servers/{id}/os-volume_attachments/
  {volume}`` (the bug #2004555 guard asks Nova whether it still uses an
  attachment) and ``os-server-external-events`` (``volume-reimaged``).
  Cinder reaches it through its ordinary ``[nova] token_auth_url`` client
  code.  Requests that Nova makes with a service token are sent with the
  ``X-Service-Roles`` header, which is what keystonemiddleware sets after
  validating a service token (this API runs with ``noauth``).  Where real
  Nova serves the same flow (the detach guard, shelve-offload and
  unshelve, volume-backed rebuild), ``test_stack_nova`` runs it through
  Nova 34 instead; what stays here needs a hook real Nova does not give
  (five force-detach use cases with states Nova cannot be put in, backend
  call spies, failing image copies).
* :class:`ImageServer` serves image files over HTTP (with byte ranges, as
  qemu-img's curl driver needs), and :class:`tests.fakes.FakeImageService`
  on it is plugged in where Cinder looks up its image service
  (``cinder.image.glance.get_default_image_service``, which
  ``get_remote_image_service`` also uses for plain image ids).  Patching
  that lookup is the one substitution: real Glance runs in the box
  (``test_stack_nova``, tempest), but these tests need images it would
  refuse or serve too well (crafted headers, failing reads).  Its
  ``get_location`` returns the HTTP URL, which the driver must never read
  itself: image data comes from ``download()``, as upstream.

The force-detach use cases are the five of Cinder's force_detach spec
(specs/liberty/implement-force-detach-for-safe-cleanup.rst):

1. DB attaching, backend never exported, Nova has no block device;
2. DB attaching, backend exported and connected, Nova has the device;
3. DB detaching, backend already cleaned up, Nova has no device;
4. DB detaching, backend still exported and connected, Nova has the device;
5. DB available after initialize_connection timed out, backend exported
   and connected, Nova has no device.
"""

import http.server
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import urllib.parse
import uuid

from cinder.compute import nova as cinder_nova  # noqa: F401 (registers opts)
from cinder import objects
import cinder.privsep
import fixtures
from testtools import content

from cinder_forcedetach.cmd import manage
from tests import fakes
from tests.functional import base
from tests.support import cutoff

SERVICE = base.SERVICE
GiB = 1 << 30
MiB = 1 << 20


# -- stand-ins for Keystone + Nova, and Glance ----------------------------


class _QuietHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, fmt, *args):
        self.server.requests.append(fmt % args)

    def _json(self, status, body, headers=None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _body(self):
        length = int(self.headers.get('Content-Length') or 0)
        return json.loads(self.rfile.read(length) or b'{}')


class _Server(object):
    """A threaded HTTP server on 127.0.0.1 with a random port."""

    handler = None

    def __init__(self):
        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                     self.handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self
        self.httpd.requests = []
        self.port = self.httpd.server_address[1]
        self.url = 'http://127.0.0.1:%d' % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class _NovaHandler(_QuietHandler):

    def do_GET(self):
        nova = self.server.owner
        path = self.path.split('?')[0].rstrip('/')
        if path in ('/identity', '/identity/v3'):
            version = {'id': 'v3.14', 'status': 'stable',
                       'updated': '2026-01-01T00:00:00Z',
                       'links': [{'rel': 'self',
                                  'href': nova.url + '/identity/v3/'}],
                       'media-types': [{
                           'base': 'application/json',
                           'type': 'application/vnd.openstack.identity-v3'
                                   '+json'}]}
            body = ({'version': version} if path.endswith('v3') else
                    {'versions': {'values': [version]}})
            return self._json(200, body)
        if path in ('/compute', '/compute/v2.1'):
            version = {'id': 'v2.1', 'status': 'CURRENT', 'version': '2.96',
                       'min_version': '2.1', 'updated': '2026-01-01T00:00:00Z',
                       'links': [{'rel': 'self',
                                  'href': nova.url + '/compute/v2.1/'}]}
            return self._json(200, {'version': version}
                              if path.endswith('2.1')
                              else {'versions': [version]})
        if path == '/compute/v2.1/servers/detail':
            # Every server on the first page; a marker asks for the next.
            query = urllib.parse.parse_qs(self.path.partition('?')[2])
            servers = [] if 'marker' in query else [
                {'id': server_id, 'status': 'ACTIVE',
                 'OS-EXT-STS:vm_state': server['vm_state'],
                 'OS-EXT-SRV-ATTR:host': server.get('host'),
                 'os-extended-volumes:volumes_attached': [
                     {'id': v, 'delete_on_termination': False}
                     for v in server.get('volumes', [])]}
                for server_id, server in sorted(nova.servers.items())]
            nova.listings.append(query)
            return self._json(200, {'servers': servers})
        match = re.match(r'^/compute/v2\.1/servers/([^/]+)/'
                         r'os-volume_attachments/([^/]+)$', path)
        if match:
            server_id, volume_id = match.groups()
            nova.lookups.append((server_id, volume_id))
            attachment_id = nova.server_volumes.get((server_id, volume_id))
            if attachment_id is None:
                return self._json(404, {'itemNotFound': {
                    'code': 404, 'message': 'volume not attached'}})
            return self._json(200, {'volumeAttachment': {
                'id': volume_id, 'volumeId': volume_id,
                'serverId': server_id, 'device': '/dev/vdb', 'tag': None,
                'delete_on_termination': False,
                'attachment_id': attachment_id,
                'bdm_uuid': str(uuid.uuid4())}})
        return self._json(404, {'itemNotFound': {'code': 404,
                                                 'message': path}})

    def do_POST(self):
        nova = self.server.owner
        path = self.path.split('?')[0].rstrip('/')
        body = self._body()
        if path == '/identity/v3/auth/tokens':
            scope = {'id': 'p' * 32, 'name': 'p',
                     'domain': {'id': 'default', 'name': 'Default'}}
            token = {
                'methods': ['token'], 'expires_at': '2099-01-01T00:00:00Z',
                'issued_at': '2026-01-01T00:00:00Z',
                'user': {'id': 'u' * 32, 'name': 'admin',
                         'domain': {'id': 'default', 'name': 'Default'}},
                'project': scope,
                'roles': [{'id': 'r' * 32, 'name': 'admin'}],
                'catalog': [{'type': 'compute', 'name': 'nova',
                             'id': 'c' * 32, 'endpoints': [{
                                 'id': 'e' * 32, 'interface': interface,
                                 'region': 'RegionOne',
                                 'region_id': 'RegionOne',
                                 'url': nova.url + '/compute/v2.1'}
                                 for interface in ('public', 'internal',
                                                   'admin')]}]}
            return self._json(201, {'token': token},
                              {'X-Subject-Token': 'mini-nova-token'})
        if path == '/compute/v2.1/os-server-external-events':
            events = body.get('events', [])
            nova.events.extend(events)
            return self._json(200, {'events': [
                dict(e, code=200, status='completed') for e in events]})
        return self._json(404, {'itemNotFound': {'code': 404,
                                                 'message': path}})


class MiniNova(_Server):
    """Keystone tokens with a catalog, and the Nova calls Cinder makes."""

    handler = _NovaHandler

    def __init__(self):
        self.server_volumes = {}   # (server id, volume id) -> attachment id
        # server id -> {'vm_state', 'host', 'volumes': [volume id]}, for
        # GET /servers/detail (the audit's listing)
        self.servers = {}
        self.listings = []
        self.events = []
        self.lookups = []
        super(MiniNova, self).__init__()

    @property
    def token_auth_url(self):
        return self.url + '/identity/v3'


class _ImageHandler(_QuietHandler):
    """Static files with HEAD, Accept-Ranges and single byte ranges."""

    def _file(self):
        name = urllib.parse.unquote(self.path.split('?')[0].lstrip('/'))
        if '/' in name or name.startswith('.'):
            return None
        path = os.path.join(self.server.owner.directory, name)
        return path if os.path.isfile(path) else None

    def do_HEAD(self):
        self._serve(body=False)

    def do_GET(self):
        self._serve(body=True)

    def _serve(self, body):
        path = self._file()
        if path is None:
            self.send_response(404)
            self.send_header('Content-Length', '0')
            self.end_headers()
            return
        size = os.path.getsize(path)
        start, end = 0, size - 1
        rng = re.match(r'bytes=(\d+)-(\d*)$', self.headers.get('Range', ''))
        if rng:
            start = int(rng.group(1))
            end = min(int(rng.group(2)) if rng.group(2) else size - 1,
                      size - 1)
            self.send_response(206)
            self.send_header('Content-Range',
                             'bytes %d-%d/%d' % (start, end, size))
        else:
            self.send_response(200)
        length = max(0, end - start + 1)
        self.send_header('Accept-Ranges', 'bytes')
        self.send_header('Content-Type', 'application/octet-stream')
        self.send_header('Content-Length', str(length))
        self.end_headers()
        if body and length:
            with open(path, 'rb') as f:
                f.seek(start)
                remaining = length
                while remaining:
                    chunk = f.read(min(remaining, MiB))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    remaining -= len(chunk)


class ImageServer(_Server):
    handler = _ImageHandler

    def __init__(self, directory):
        self.directory = directory
        super(ImageServer, self).__init__()


def make_image(directory, name, pattern, virtual_size, fmt='qcow2',
               data_length=MiB):
    """An image whose first *data_length* bytes are *pattern*."""
    raw = os.path.join(directory, name + '.raw')
    subprocess.run(['qemu-img', 'create', '-q', '-f', 'raw', raw,
                    str(virtual_size)], check=True)
    subprocess.run(['qemu-io', '-f', 'raw', '-c',
                    'write -P 0x%02x 0 %d' % (pattern, data_length), raw],
                   check=True, capture_output=True)
    if fmt == 'raw':
        return raw
    out = os.path.join(directory, name + '.' + fmt)
    subprocess.run(['qemu-img', 'convert', '-q', '-f', 'raw', '-O', fmt,
                    raw, out], check=True)
    os.unlink(raw)
    return out


# -- the test base ------------------------------------------------------------


class ApiFlowTestCase(base.CinderTgtTestCase):
    """Real API + our driver + tgtd, with MiniNova and an image source."""

    def setUp(self):
        self.nova = MiniNova()
        self.addCleanup(self.nova.stop)
        self.image_dir = tempfile.mkdtemp(prefix='cfd-images-')
        self.addCleanup(shutil.rmtree, self.image_dir, True)
        self.image_server = ImageServer(self.image_dir)
        self.addCleanup(self.image_server.stop)
        self.images = self.image_service()
        # Must be patched before the API service is built: its volume API
        # object keeps the image service it gets at start.
        self.useFixture(fixtures.MonkeyPatch(
            'cinder.image.glance.get_default_image_service',
            lambda: self.images))
        # tgtadm runs in-process (we are root): set before the volume
        # service starts, whose driver init already calls tgtadm.
        cinder.privsep.sys_admin_pctxt.set_client_mode(False)
        self.addCleanup(cinder.privsep.sys_admin_pctxt.set_client_mode, True)
        super(ApiFlowTestCase, self).setUp()

    def image_service(self):
        """Glance: images are files served by :attr:`image_server`."""
        return fakes.FakeImageService(server=self.image_server,
                                      declare_virtual_size=True)

    def add_image(self, name, path, disk_format, **kwargs):
        """A copy of *path* as a new image; returns its id."""
        return self.images.add(path=path, disk_format=disk_format, name=name,
                               **kwargs)

    def _get_flags(self):
        f = super(ApiFlowTestCase, self)._get_flags()
        f['token_auth_url'] = {'v': self.nova.token_auth_url, 'g': 'nova'}
        f['timeout'] = {'v': 10, 'g': 'nova'}
        return f

    # -- API calls as Nova and as an operator make them ---------------------

    def request(self, method, path, body=None, headers=None, expect=None):
        """One API call; returns (status, decoded body)."""
        kwargs = {'method': method, 'headers': dict(headers or {})}
        if body is not None:
            kwargs['body'] = json.dumps(body)
        resp = self.api.api_request(path, **kwargs)
        if expect is not None:
            self.assertEqual(expect, resp.status_code,
                             '%s %s: %s' % (method, path, resp.text))
        data = json.loads(resp.text) if resp.text else {}
        return resp.status_code, data

    def reserve(self, volume_id, instance_uuid):
        """attachment create without connector (Nova: shelved offloaded)."""
        _s, body = self.request('POST', '/attachments', {'attachment': {
            'volume_uuid': volume_id, 'instance_uuid': instance_uuid}},
            expect=200)
        return body['attachment']

    def update_attachment(self, attachment_id, host):
        _s, body = self.request(
            'PUT', '/attachments/%s' % attachment_id,
            {'attachment': {'connector': base.connector_for(host)}},
            expect=200)
        return body['attachment']

    def complete(self, attachment_id):
        self.request('POST', '/attachments/%s/action' % attachment_id,
                     {'os-complete': {}}, expect=204)

    def nova_attach(self, volume_id, host, instance_uuid=None, complete=True,
                    nova_knows=True):
        """Nova's attach: reserve, update with connector, complete."""
        instance_uuid = instance_uuid or str(uuid.uuid4())
        att = self.reserve(volume_id, instance_uuid)
        att = self.update_attachment(att['id'], host)
        if complete:
            self.complete(att['id'])
        if nova_knows:
            self.nova.server_volumes[(instance_uuid, volume_id)] = att['id']
        return att, att['connection_info'], instance_uuid

    def delete_attachment(self, attachment_id, service=True, expect=200):
        return self.request('DELETE', '/attachments/%s' % attachment_id,
                            headers=SERVICE if service else None,
                            expect=expect)

    def force_detach(self, volume_id, connector=None, attachment_id=None,
                     service=False, expect=202):
        params = {}
        if connector is not None:
            params['connector'] = connector
        if attachment_id:
            params['attachment_id'] = attachment_id
        return self.request('POST', '/volumes/%s/action' % volume_id,
                            {'os-force_detach': params},
                            headers=SERVICE if service else None,
                            expect=expect)

    # -- state -------------------------------------------------------------

    def set_db_state(self, volume_id, status, attach_status=None,
                     attachment_id=None):
        volume = self.db_volume(volume_id)
        volume.status = status
        if attach_status:
            volume.attach_status = attach_status
        volume.save()
        if attachment_id and attach_status:
            att = objects.VolumeAttachment.get_by_id(self.ctxt,
                                                     attachment_id)
            att.attach_status = attach_status
            att.save()

    def spy(self, *names):
        """Record calls of driver methods (the real methods still run)."""
        calls = []
        for name in names:
            real = getattr(self.driver, name)

            def wrapper(*args, _name=name, _real=real, **kwargs):
                calls.append(_name)
                return _real(*args, **kwargs)
            setattr(self.driver, name, wrapper)
            self.addCleanup(delattr, self.driver, name)
        return calls

    # -- assertions ----------------------------------------------------------

    def assert_detached(self, volume_id):
        super(ApiFlowTestCase, self).assert_detached(volume_id)
        self.assertEqual('available',
                         self.api.get_volume(volume_id)['status'])

    def assert_no_target(self, volume_id):
        self.assertIsNone(self.target_state(volume_id),
                          'tgtd still exports volume %s' % volume_id)

    def assert_fenced(self, session):
        """The old initiator's next write and read are refused.

        Positively (a time-out fails), and no byte of the write reaches
        the volume; the session's last control write is the one before
        the teardown.
        """
        self.assert_cut_off(session, 0xee, read=True)

    def assert_reattachable(self, volume_id, host='compute9'):
        """The volume attaches elsewhere and still holds the old data."""
        _att, info, _inst = self.nova_attach(volume_id, host)
        session = self.login(info, host)
        self.assertTrue(session.read(0x5a, offset=4096),
                        'data written before the force-detach is lost')
        return session

    def live_volume(self, host='compute1', complete=True, nova_knows=True):
        """A volume attached through the API, with a live initiator."""
        vol = self.create_volume()
        att, info, inst = self.nova_attach(vol['id'], host, complete=complete,
                                           nova_knows=nova_knows)
        session = self.login(info, host)
        self.control_write(session, 0x5a, offset=4096)
        state = self.target_state(vol['id'])
        self.assertEqual([base.initiator_name(host)], state.acls)
        self.assertEqual(1, len(state.sessions))
        return vol['id'], att, inst, session


class ForceDetachUseCasesTestCase(ApiFlowTestCase):
    """UseCases 1-5 of the force_detach spec, through os-force_detach."""

    def test_uc1_attaching_never_exported(self):
        vol_id = self.create_volume()['id']
        inst = str(uuid.uuid4())
        att = self.reserve(vol_id, inst)
        # The attach stopped after Cinder marked it attaching; the backend
        # never exported anything and Nova has no block device.
        self.set_db_state(vol_id, 'attaching', 'attaching', att['id'])
        self.assert_no_target(vol_id)

        self.force_detach(vol_id, attachment_id=att['id'])

        self.assert_detached(vol_id)
        self.assert_no_target(vol_id)
        _a, info, _i = self.nova_attach(vol_id, 'compute2')
        self.assertTrue(self.login(info, 'compute2').write(0x11))

    def test_uc2_attaching_exported_and_connected(self):
        vol_id, att, inst, session = self.live_volume(complete=False)
        self.assertEqual(('attaching', 'attaching',
                          [(att['id'], 'attaching')]), self.db_state(vol_id))

        # Nova still has the block device: without a service token the
        # bug-2004555 guard refuses, and nothing changes.
        self.force_detach(vol_id, attachment_id=att['id'], expect=409)
        self.assertEqual(('attaching', 'attaching',
                          [(att['id'], 'attaching')]), self.db_state(vol_id))
        self.control_write(session, 0x5a, offset=4096)

        self.force_detach(vol_id, attachment_id=att['id'], service=True)

        self.assert_detached(vol_id)
        self.assert_no_target(vol_id)
        self.assert_fenced(session)
        self.assert_reattachable(vol_id)

    def test_uc3_detaching_backend_already_clean(self):
        vol_id, att, inst, session = self.live_volume(nova_knows=False)
        # The detach got through the backend (export gone, host fenced)
        # and Nova's side, but Cinder's database stayed 'detaching'.
        self.driver.terminate_connection(self.db_volume(vol_id), None)
        self.driver.remove_export(self.ctxt, self.db_volume(vol_id))
        self.assert_no_target(vol_id)
        self.set_db_state(vol_id, 'detaching')

        self.force_detach(vol_id)

        self.assert_detached(vol_id)
        self.assert_no_target(vol_id)
        self.assert_fenced(session)
        self.assert_reattachable(vol_id)

    def test_uc4_detaching_still_exported_and_connected(self):
        vol_id, att, inst, session = self.live_volume()
        self.set_db_state(vol_id, 'detaching')
        self.assertEqual(('detaching', 'attached',
                          [(att['id'], 'attached')]), self.db_state(vol_id))

        self.force_detach(vol_id, attachment_id=att['id'], expect=409)
        self.assertIsNotNone(self.target_state(vol_id))
        self.control_write(session, 0x5a, offset=4096)

        self.force_detach(vol_id, connector=base.connector_for('compute1'),
                          attachment_id=att['id'], service=True)

        self.assert_detached(vol_id)
        self.assert_no_target(vol_id)
        self.assert_fenced(session)
        self.assert_reattachable(vol_id)

    def test_uc5_available_after_initialize_connection_timeout(self):
        vol_id, att, inst, session = self.live_volume(complete=False,
                                                      nova_knows=False)
        # Nova gave up waiting for initialize_connection and rolled its
        # side back; Cinder shows the volume available, yet the backend
        # exports it and the host is logged in.
        objects.VolumeAttachment.get_by_id(self.ctxt, att['id']).destroy()
        self.set_db_state(vol_id, 'available', 'detached')
        self.assertEqual(('available', 'detached', []),
                         self.db_state(vol_id))

        self.force_detach(vol_id, connector=base.connector_for('compute1'))

        self.assert_detached(vol_id)
        self.assert_fenced(session)
        self.assert_no_target(vol_id)
        self.assert_reattachable(vol_id)

    def test_in_use_host_gone(self):
        """In-use, the compute host died with the initiator logged in."""
        vol_id, att, inst, session = self.live_volume()
        del self.nova.server_volumes[(inst, vol_id)]  # instance deleted

        self.force_detach(vol_id)  # an operator, no service token

        self.assertIn((inst, vol_id), self.nova.lookups)
        self.assert_detached(vol_id)
        self.assert_no_target(vol_id)
        self.assert_fenced(session)
        self.assert_reattachable(vol_id)

    def test_backend_down_returns_500_and_keeps_db(self):
        vol_id, att, inst, session = self.live_volume(nova_knows=False)
        before = self.db_state(vol_id)
        self.tgtd.kill()

        status, body = self.force_detach(vol_id, expect=500)

        self.assertEqual(before, self.db_state(vol_id))
        self.assertEqual(('in-use', 'attached'), before[:2])
        self.assertEqual('attached', objects.VolumeAttachment.get_by_id(
            self.ctxt, att['id']).attach_status)
        # The daemon comes back empty; the same call now converges.
        self.tgtd.start()
        self.force_detach(vol_id)
        self.assert_detached(vol_id)
        self.assert_no_target(vol_id)


class ShelvedOffloadedTestCase(ApiFlowTestCase):
    """Attachments without a connector: 'reserved', no backend call."""

    def test_delete_reserved_attachment_touches_no_backend(self):
        vol_id = self.create_volume()['id']
        att = self.reserve(vol_id, str(uuid.uuid4()))
        calls = self.spy('create_export', 'initialize_connection',
                         'terminate_connection', 'remove_export')
        self.tgtd.kill()  # any backend call would now fail

        self.delete_attachment(att['id'])

        self.assertEqual([], calls)
        self.assert_detached(vol_id)
        self.tgtd.start()
        self.assert_no_target(vol_id)

    def test_force_detach_while_reserved(self):
        vol_id = self.create_volume()['id']
        att = self.reserve(vol_id, str(uuid.uuid4()))

        self.force_detach(vol_id, attachment_id=att['id'])

        self.assert_detached(vol_id)
        self.assert_no_target(vol_id)

    def test_detach_while_reserved(self):
        vol_id = self.create_volume()['id']
        att = self.reserve(vol_id, str(uuid.uuid4()))

        self.request('POST', '/volumes/%s/action' % vol_id,
                     {'os-detach': {'attachment_id': att['id']}},
                     headers=SERVICE, expect=202)

        self.assert_detached(vol_id)
        self.assert_no_target(vol_id)


class ReimageTestCase(ApiFlowTestCase):
    """Volume-backed server rebuild: Nova's sequence around os-reimage."""

    def setUp(self):
        super(ReimageTestCase, self).setUp()
        work = self.useFixture(fixtures.TempDir()).path
        self.new_image = self.add_image(
            'new', make_image(work, 'new', 0xb7, 64 * MiB), 'qcow2')

    def rebuild_until_reimage(self, image_id):
        """Nova: keep the volume reserved, drop the old attachment, reimage.

        Returns (volume id, old session, new attachment, instance).
        """
        vol_id, old_att, inst, old = self.live_volume()
        new_att = self.reserve(vol_id, inst)
        self.delete_attachment(old_att['id'])  # with Nova's service token
        self.nova.server_volumes[(inst, vol_id)] = new_att['id']
        self.assertEqual('reserved', self.api.get_volume(vol_id)['status'])
        self.assert_fenced(old)
        self.request('POST', '/volumes/%s/action' % vol_id,
                     {'os-reimage': {'image_id': image_id,
                                     'reimage_reserved': True}},
                     expect=202)
        return vol_id, old, new_att, inst

    def assert_filled(self, data, byte):
        wrong = len(data) - data.count(bytes([byte]))
        self.assertEqual(0, wrong, '%d of %d bytes are not 0x%02x' % (
            wrong, len(data), byte))

    def volume_head(self, vol_id, length=MiB):
        with open(self.driver.local_path(self.db_volume(vol_id)), 'rb') as f:
            return f.read(length)

    def test_too_large_image_puts_volume_in_error(self):
        # Glance may not know the virtual size; the driver checks it.
        work = self.useFixture(fixtures.TempDir()).path
        big = self.add_image('big', make_image(work, 'big', 0xc3, 2 * GiB),
                             'qcow2', declare_virtual_size=False)
        vol_id, _old, new_att, _inst = self.rebuild_until_reimage(big)

        vol = self.wait_volume(vol_id, ('error', 'reserved'))

        self.assertEqual('error', vol['status'])
        _s, body = self.request('GET', '/attachments/%s' % new_att['id'],
                                expect=200)
        self.assertEqual('reserved', body['attachment']['status'])
        self.assertNotIn(b'\xc3' * 512, self.volume_head(vol_id),
                         'the too large image was written')
        self.assertEqual([], self.nova.events)

    def test_failing_copy_puts_volume_in_error(self):
        broken = self.add_image(
            'broken', make_image(self.image_dir, 'b', 0xd4, 64 * MiB),
            'qcow2')
        with open(os.path.join(self.image_dir, broken), 'r+b') as f:
            f.write(b'\0' * 4096)   # no longer a qcow2 header
        vol_id, _old, new_att, _inst = self.rebuild_until_reimage(broken)

        vol = self.wait_volume(vol_id, ('error', 'reserved'))

        self.assertEqual('error', vol['status'])
        _s, body = self.request('GET', '/attachments/%s' % new_att['id'],
                                expect=200)
        self.assertEqual('reserved', body['attachment']['status'])
        self.assert_filled(self.volume_head(vol_id, 8192)[4096:], 0x5a)


class MultiattachTestCase(ApiFlowTestCase):

    def test_two_hosts_share_one_export(self):
        vol_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        att_a, info_a, _ia = self.nova_attach(vol_id, 'compute1')
        att_b, info_b, _ib = self.nova_attach(vol_id, 'compute2')
        a = self.login(info_a, 'compute1')
        b = self.login(info_b, 'compute2')
        self.control_write(a)
        targets = self.driver.target.list_targets()
        self.assertEqual(1, len([t for t in targets if vol_id in t]))
        state = self.target_state(vol_id)
        self.assertEqual(sorted([base.initiator_name('compute1'),
                                 base.initiator_name('compute2')]),
                         sorted(state.acls))
        self.assertEqual(info_a['target_iqn'], info_b['target_iqn'])

        self.delete_attachment(att_a['id'])

        state = self.target_state(vol_id)
        self.assertIsNotNone(state, 'the shared export was removed')
        self.assertEqual([base.initiator_name('compute2')], state.acls)
        self.assertTrue(b.write(0x42, offset=MiB))
        self.assertTrue(b.read(0x42, offset=MiB))
        self.assert_fenced(a)
        self.assertEqual('in-use', self.api.get_volume(vol_id)['status'])

        self.control_write(b, 0x42, offset=MiB)
        self.delete_attachment(att_b['id'])

        self.assert_no_target(vol_id)
        self.assert_detached(vol_id)
        self.assert_cut_off(b, 0x43)

    def test_force_detach_one_host_keeps_the_other(self):
        vol_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        att_a, info_a, _ia = self.nova_attach(vol_id, 'compute1')
        att_b, info_b, _ib = self.nova_attach(vol_id, 'compute2')
        a = self.login(info_a, 'compute1')
        b = self.login(info_b, 'compute2')
        self.control_write(a)

        self.force_detach(vol_id, connector=base.connector_for('compute1'),
                          attachment_id=att_a['id'], service=True)

        self.assert_fenced(a)
        self.assertTrue(b.write(0x42, offset=MiB),
                        'the other host lost the volume')
        state = self.target_state(vol_id)
        self.assertIsNotNone(state, 'the shared export was removed')
        self.assertEqual([base.initiator_name('compute2')], state.acls)
        self.assertEqual(('in-use', 'attached',
                          [(att_b['id'], 'attached')]),
                         self.db_state(vol_id))


class ServiceTokenGuardTestCase(ApiFlowTestCase):
    """Cinder's bug-2004555 guard, as a deployment with Nova sees it."""

    def test_guard_multiattach_needs_service_token(self):
        vol_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        att_a, _info_a, _ia = self.nova_attach(vol_id, 'compute1',
                                               nova_knows=False)
        self.nova_attach(vol_id, 'compute2', nova_knows=False)
        # Two attachments and no service token: refused even though Nova
        # knows neither, because the guard cannot tell which one goes.
        self.force_detach(vol_id, connector=base.connector_for('compute1'),
                          attachment_id=att_a['id'], expect=409)
        self.assertEqual(2, len(self.db_state(vol_id)[2]))

    def test_attachment_without_instance_needs_no_service_token(self):
        vol = self.create_volume()
        att, info = self.attach(vol['id'], 'compute1')  # no instance_uuid
        session = self.login(info, 'compute1')

        self.force_detach(vol['id'], attachment_id=att['id'])

        self.assertEqual([], self.nova.lookups)
        self.assert_detached(vol['id'])
        self.assert_fenced(session)


class CliTestCase(ApiFlowTestCase):
    """cinder-forcedetach against the real API: output and exit codes."""

    def cli(self, *argv, env=None):
        environ = {'OS_AUTH_TYPE': 'noauth',
                   'CINDER_ENDPOINT': self.auth_url,
                   'OS_PROJECT_ID': self.api.project_id,
                   'OS_USER_ID': 'admin', 'OS_VOLUME_API_VERSION': '3.70'}
        environ.update(env or {})
        out, err = io.StringIO(), io.StringIO()
        with fixtures.EnvironmentVariable('CINDERCLIENT_BYPASS_URL'):
            patches = [fixtures.EnvironmentVariable(k, v)
                       for k, v in environ.items()]
            for patch in patches:
                patch.setUp()
            try:
                code = manage.main(list(argv), stdout=out, stderr=err)
            finally:
                for patch in patches:
                    patch.cleanUp()
        return code, out.getvalue(), err.getvalue()

    def test_attachment_show_masks_secrets(self):
        vol_id, att, inst, session = self.live_volume()
        password = att['connection_info']['auth_password']
        self.assertGreater(len(password or ''), 8)

        code, out, err = self.cli('attachment', 'show', att['id'])
        self.assertEqual(0, code, err)
        self.assertIn('connection_info.auth_password', out)
        self.assertIn('***', out)
        self.assertNotIn(password, out + err)
        self.assertIn(att['connection_info']['target_iqn'], out)

        code, out, err = self.cli('--format', 'json', 'attachment', 'show',
                                  att['id'])
        self.assertEqual(0, code, err)
        shown = json.loads(out)
        self.assertEqual('***', shown['connection_info']['auth_password'])
        self.assertEqual(att['id'], shown['id'])

        code, out, _err = self.cli('--format', 'json', 'attachment', 'show',
                                   att['id'], '--show-secrets')
        self.assertEqual(password,
                         json.loads(out)['connection_info']['auth_password'])

        code, _out, _err = self.cli('attachment', 'show', str(uuid.uuid4()))
        self.assertEqual(manage.EXIT_NOT_FOUND, code)

    def test_force_detach_exit_codes(self):
        vol_id, att, inst, session = self.live_volume()
        connector = os.path.join(self.useFixture(fixtures.TempDir()).path,
                                 'connector.json')
        with open(connector, 'w') as f:
            json.dump(base.connector_for('compute1'), f)

        # 1: bad input, nothing sent.
        code, _o, _e = self.cli('volume', 'force-detach', vol_id,
                                '--connector', '{"host": ')
        self.assertEqual(manage.EXIT_USAGE, code)
        code, _o, _e = self.cli('volume', 'force-detach')
        self.assertEqual(manage.EXIT_USAGE, code)
        # 2: not found.
        code, _o, _e = self.cli('volume', 'force-detach', str(uuid.uuid4()))
        self.assertEqual(manage.EXIT_NOT_FOUND, code)
        # 3: Nova still uses the attachment, and no service token.
        code, _o, err = self.cli('volume', 'force-detach', vol_id,
                                 '--connector', '@' + connector)
        self.assertEqual(manage.EXIT_CONFLICT, code, err)
        self.assertTrue(session.write(0x5a, offset=4096))
        # 5: endpoint unreachable.
        code, _o, _e = self.cli(
            'volume', 'force-detach', vol_id, '--service-token',
            env={'CINDER_ENDPOINT': 'http://127.0.0.1:9/v3'})
        self.assertEqual(manage.EXIT_UNREACHABLE, code)
        # 4: the backend fails (tgtd down); the database is unchanged.
        self.tgtd.kill()
        code, _o, err = self.cli('volume', 'force-detach', vol_id,
                                 '--service-token')
        self.assertEqual(manage.EXIT_BACKEND, code, err)
        self.assertEqual('in-use', self.api.get_volume(vol_id)['status'])
        self.tgtd.start()
        # 0: done, with the volume's new state printed.
        code, out, err = self.cli('--format', 'json', 'volume',
                                  'force-detach', vol_id, '--service-token',
                                  '--connector', '@' + connector,
                                  '--attachment', att['id'])
        self.assertEqual(0, code, err)
        self.assertEqual({'volume_id': vol_id, 'status': 'available',
                          'attachments': []}, json.loads(out))
        self.assert_detached(vol_id)
        # 0 again: re-running the finished force-detach succeeds, whether
        # Cinder runs the (idempotent) teardown again or refuses the
        # detached volume (then the CLI says "already detached").
        results = []
        for extra in (['--service-token', '--connector', '@' + connector,
                       '--attachment', att['id']], ['--service-token'], [],
                      ['--attachment', att['id']]):
            code, out, err = self.cli('--format', 'json', 'volume',
                                      'force-detach', vol_id, *extra)
            self.assertEqual(0, code, (extra, err))
            shown = json.loads(out)
            self.assertEqual(('available', []),
                             (shown['status'], shown['attachments']))
            results.append(shown.get('result'))
        self.addDetail('re-run results', content.text_content(
            repr(results)))
        self.assert_detached(vol_id)

    def test_force_detach_one_host_of_several(self):
        """The CLI ends one host of a multiattach volume; the other writes.

        Cinder refuses an os-force_detach of a volume with several
        attachments (bug #2004555's guard, and our driver would get no
        connector), so the CLI deletes the named attachment.  Without the
        service token Nova's attachment stays Nova's to end (409, nothing
        changed); with it, compute1's access is cut and compute2 keeps
        the volume.
        """
        vol_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        att1, info1, _inst = self.nova_attach(vol_id, 'compute1')
        att2, info2, _inst = self.nova_attach(vol_id, 'compute2')
        host1, host2 = self.login(info1, 'compute1'), self.login(info2,
                                                                 'compute2')
        code, _o, err = self.cli('volume', 'force-detach', vol_id,
                                 '--attachment', att1['id'])
        self.assertEqual(manage.EXIT_CONFLICT, code, err)
        self.assertEqual(2, len(self.db_state(vol_id)[2]))

        self.control_write(host1)
        code, out, err = self.cli('--format', 'json', 'volume',
                                  'force-detach', vol_id, '--service-token',
                                  '--attachment', att1['id'])
        self.assertEqual(0, code, err)
        shown = json.loads(out)
        self.assertEqual(('in-use', [att2['id']]),
                         (shown['status'], shown['attachments']))
        self.assert_cut_off(host1, volume_id=vol_id)
        self.assertEqual(cutoff.Outcome.WROTE,
                         host2.try_write(0x6b, offset=8192).kind)
        self.assertEqual([base.initiator_name('compute2')],
                         self.target_state(vol_id).acls)

    def test_force_detach_needs_connector_on_multiattach(self):
        vol_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        self.nova_attach(vol_id, 'compute1')
        self.nova_attach(vol_id, 'compute2')
        code, _o, err = self.cli('volume', 'force-detach', vol_id,
                                 '--service-token')
        self.assertEqual(manage.EXIT_USAGE, code)
        self.assertIn('--connector', err)
        self.assertEqual(2, len(self.db_state(vol_id)[2]))
