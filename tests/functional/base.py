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

"""Real Cinder, in-process, loading our driver against a real tgtd.

Cinder's own functional harness (shipped in the ``cinder`` wheel) starts
the WSGI API, scheduler and volume services in this process over
oslo.messaging's ``fake:/`` transport and SQLite; the volume service loads
``cinder_forcedetach.drivers.iscsi.TgtISCSIDriver``, which drives a tgtd
this test started.  Tooz locks are real (file backend).
"""

import os
import sys
import time

from cinder import context
from cinder import objects
import cinder.privsep
from cinder.tests.functional import functional_helpers
from cinder.volume import configuration
import fixtures
from oslo_config import cfg

# Imported before flags are set, so that its options are registered.
from cinder_forcedetach.conformance import harness
from cinder_forcedetach.conformance import suite
from cinder_forcedetach.drivers import iscsi  # noqa: F401
from tests.functional import fixtures as fd_fixtures

CONF = cfg.CONF
DRIVER = 'cinder_forcedetach.drivers.iscsi.TgtISCSIDriver'
BACKEND = configuration.SHARED_CONF_GROUP
# What keystonemiddleware sets for a request with a valid service token
# (this API runs with noauth): Cinder's bug 2004555 guard then lets a
# service detach an attachment Nova holds.
SERVICE = {'X-Service-Roles': 'service'}


#: The exit status of a child a crash test kills with ``os._exit``.
CRASH_EXIT = suite.CRASH_EXIT


def crash_in_child(test, run):
    """Run *run* in a forked child that must die with :data:`CRASH_EXIT`.

    *run* arms its crash (``os._exit(CRASH_EXIT)`` at the chosen point)
    and does the work, in a new native thread of the child (the kit's
    :func:`cinder_forcedetach.conformance.suite.run_in_child`, whose
    docstring says why that is sound, Ceph included); a child that
    returns, raises or hangs instead fails *test*, with its traceback.
    """
    status, why = suite.run_in_child(run)
    test.assertEqual(CRASH_EXIT, status,
                     'the child did not crash where asked: ' + why)


def initiator_name(host):
    return 'iqn.2026-11.org.cinder-forcedetach.test:%s' % host


def connector_for(host, **extra):
    connector = {'host': host, 'initiator': initiator_name(host),
                 'ip': '127.0.0.1', 'platform': 'x86_64', 'os_type': 'linux',
                 'multipath': False}
    connector.update(extra)
    return connector


class CinderServicesTestCase(functional_helpers._FunctionalTestBase):
    """Cinder API + scheduler + volume services loading one of our drivers.

    Subclasses set the backend's flags in ``_get_flags``.  The database is
    a file rather than ``sqlite://`` so that a forked child (the crash
    tests, a host's volume-service process) sees the services' database.
    """

    MOCK_TOOZ = False
    _osapi_version = '3.70'

    def setUp(self):
        self._use_database_file()
        super(CinderServicesTestCase, self).setUp()
        self.api.create_type(self._vol_type_name)
        self.driver = self.volume.manager.driver
        self.ctxt = context.get_admin_context()

    def _use_database_file(self):
        # The same file as the conformance kit's harness: one per process.
        harness.use_database_file(self)

    def _get_flags(self):
        f = super(CinderServicesTestCase, self)._get_flags()
        f['default_volume_type'] = {'v': self._vol_type_name}
        # The reconciler would outlive this test's services in the test
        # process and audit the next test's volumes: tests that want it
        # (test_reconciler) turn it on.
        f['forcedetach_reconcile_interval'] = {'v': 0, 'g': BACKEND}
        return f

    def _start_api_service(self):
        # pip installs api-paste.ini under <venv>/etc, not next to cinder/.
        paste = os.path.join(sys.prefix, 'etc', 'cinder', 'api-paste.ini')
        with fixtures.MonkeyPatch('os.path.abspath', lambda p: paste
                                  if p.endswith('api-paste.ini') else
                                  os.path.normpath(p)):
            super(CinderServicesTestCase, self)._start_api_service()

    def _wait_status(self, get, kind, resource_id, statuses, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = get(resource_id)
            if found['status'] in statuses:
                return found
            time.sleep(0.1)
        self.fail('%s %s stayed %s, wanted %s' % (
            kind, resource_id, found['status'], statuses))

    def wait_volume(self, volume_id, statuses, timeout=30):
        return self._wait_status(self.api.get_volume, 'volume', volume_id,
                                 statuses, timeout)

    def wait_snapshot(self, snapshot_id, statuses=('available', 'error'),
                      timeout=30):
        return self._wait_status(self.api.get_snapshot, 'snapshot',
                                 snapshot_id, statuses, timeout)

    def revert(self, volume_id, snapshot_id):
        """os-revert (3.40) to *snapshot_id*; waits until available."""
        self.api.api_post('/volumes/%s/action' % volume_id,
                          {'revert': {'snapshot_id': snapshot_id}},
                          check_response_status=[202])
        return self.wait_volume(volume_id, ('available',))

    def create_volume(self, size=1, **extra):
        body = {'size': size}
        body.update(extra)
        vol = self.api.post_volume({'volume': body})
        return self.wait_volume(vol['id'], ('available', 'error'))

    def multiattach_type(self, name='forcedetach-multiattach'):
        """A volume type whose volumes may be attached to several hosts."""
        types = [t['name'] for t in self.api.api_get('/types')['volume_types']]
        if name not in types:
            self.api.api_post('/types', {'volume_type': {
                'name': name, 'extra_specs': {'multiattach': '<is> True'}}})
        return name

    def db_volume(self, volume_id):
        return objects.Volume.get_by_id(self.ctxt, volume_id)

    def host_connector(self, host):
        """The connector *host* sends (as os-brick builds it for Nova)."""
        return connector_for(host)

    def attach(self, volume_id, host, complete=True, instance=None):
        """Attachment API (3.27+) as Nova drives it; returns (att, info)."""
        body = {'volume_uuid': volume_id,
                'connector': self.host_connector(host)}
        if instance:
            body['instance_uuid'] = instance
        att = self.api.api_post('/attachments',
                                {'attachment': body})['attachment']
        if complete:
            self.api.api_post('/attachments/%s/action' % att['id'],
                              {'os-complete': {}},
                              check_response_status=[204])
        return att, att['connection_info']

    def reset_status(self, volume_id, **body):
        """``os-reset_status`` as an operator (or Horizon) sends it."""
        self.api.api_post('/volumes/%s/action' % volume_id,
                          {'os-reset_status': body},
                          check_response_status=[202])

    def force_detach_api(self, volume_id, connector=None, attachment_id=None,
                         status=202, service=False):
        """os-force_detach; *service*: as a service (Nova's token)."""
        body = {'os-force_detach': {}}
        if connector is not None:
            body['os-force_detach']['connector'] = connector
        if attachment_id:
            body['os-force_detach']['attachment_id'] = attachment_id
        return self.api.api_post('/volumes/%s/action' % volume_id, body,
                                 check_response_status=[status],
                                 headers=SERVICE if service else {})


class CinderTgtTestCase(CinderServicesTestCase):
    """Our iSCSI driver in Cinder's services, on a real tgtd."""

    _vol_type_name = 'forcedetach'

    def setUp(self):
        self.volumes_dir = self.useFixture(fixtures.TempDir()).path
        self.tgtd = self.useFixture(fd_fixtures.TgtdFixture()).tgtd
        # We are root: tgtadm runs in this process, not through a privsep
        # daemon (Cinder's harness forbids starting one).
        cinder.privsep.sys_admin_pctxt.set_client_mode(False)
        self.addCleanup(cinder.privsep.sys_admin_pctxt.set_client_mode, True)
        super(CinderTgtTestCase, self).setUp()
        self.initiators = []
        self.addCleanup(self._close_initiators)

    def _get_flags(self):
        f = super(CinderTgtTestCase, self)._get_flags()
        f['volume_driver'] = {'v': DRIVER, 'g': BACKEND}
        f['forcedetach_tgt_control_port'] = {'v': self.tgtd.control_port,
                                             'g': BACKEND}
        f['forcedetach_volumes_dir'] = {'v': self.volumes_dir, 'g': BACKEND}
        f['target_ip_address'] = {'v': '127.0.0.1', 'g': BACKEND}
        f['target_port'] = {'v': self.tgtd.port, 'g': BACKEND}
        return f

    # -- helpers ----------------------------------------------------------

    def login(self, connection_info, host):
        """A live qemu-io initiator holding the volume for *host*."""
        data = connection_info
        if 'data' in data:
            data = data['data']
        session = fd_fixtures.QemuIoInitiator(
            data['target_portal'], data['target_iqn'], initiator_name(host),
            data.get('auth_username'), data.get('auth_password'),
            lun=data['target_lun'])
        self.initiators.append(session)
        self.assertTrue(session.write(0x5a), 'initiator could not write')
        return session

    def _close_initiators(self):
        for session in self.initiators:
            session.close()

    def target_state(self, volume_id):
        name = CONF[BACKEND].target_prefix + 'volume-%s' % volume_id
        return self.driver.target.find(name)
