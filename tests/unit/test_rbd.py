"""The RBD driver's decisions that need no cluster: who gets fenced, how
monitor addresses, image locations and qemu names are read and written,
and what the refresh command masks."""

import io
import json
import sys

import ddt
import fixtures
import testtools

from cinder_forcedetach.cmd import local
from cinder_forcedetach.cmd import refresh
from cinder_forcedetach.drivers import rbd as rbd_driver

A = {'host': 'compute1', 'ip': '127.0.0.11'}
B = {'host': 'compute2', 'ip': '127.0.0.12'}
ADDR_A = '127.0.0.11:0/1001'
ADDR_A2 = '127.0.0.11:0/1002'
ADDR_B = '127.0.0.12:0/2001'
OWN = '127.0.0.1:0/3001'


def no_dns(name):
    raise AssertionError('resolved %s' % name)


@ddt.ddt
class SelectFenceTargetsTestCase(testtools.TestCase):

    def select(self, holders, connectors, keep=(), own=(OWN,)):
        return rbd_driver.select_fence_targets(holders, own, connectors,
                                               keep, resolve=no_dns)

    def test_one_host_only_its_clients(self):
        targets, spared = self.select([ADDR_A, ADDR_B, ADDR_A2, OWN], [A])
        self.assertEqual([ADDR_A, ADDR_A2], targets)
        self.assertEqual({(ADDR_B, 'another host'), (OWN, 'this driver')},
                         set(spared))

    def test_every_host_but_never_ourselves(self):
        targets, spared = self.select([ADDR_A, ADDR_B, OWN], [None])
        self.assertEqual([ADDR_A, ADDR_B], targets)
        self.assertEqual([(OWN, 'this driver')], spared)

    def test_multiattach_keeps_the_attachment_that_stays(self):
        targets, spared = self.select([ADDR_A, ADDR_B], [None], keep=[B])
        self.assertEqual([ADDR_A], targets)
        self.assertEqual([(ADDR_B, 'an attachment that stays')], spared)

    def test_same_ip_kept_wins_over_detached(self):
        """Two attachments from one host IP: keeping one keeps the IP."""
        targets, _spared = self.select([ADDR_A], [A], keep=[dict(A)])
        self.assertEqual([], targets)

    @ddt.data('v1:127.0.0.11:0/1001', '[v1:127.0.0.11:0/1001]',
              'any:127.0.0.11:0/1001', ' 127.0.0.11:0/1001 ')
    def test_address_forms_and_duplicates(self, form):
        targets, _spared = self.select([form, ADDR_A], [A])
        self.assertEqual([ADDR_A], targets)

    def test_nothing_holds_it(self):
        self.assertEqual(([], []), self.select([], [A]))

    def test_host_name_resolved_when_no_ip(self):
        targets, _spared = rbd_driver.select_fence_targets(
            [ADDR_A, ADDR_B], [], [{'host': 'compute1'}], [],
            resolve=lambda name: ['127.0.0.11'])
        self.assertEqual([ADDR_A], targets)

    def test_connector_host_may_be_an_ip(self):
        self.assertEqual({'127.0.0.12'},
                         rbd_driver.connector_ips({'host': '127.0.0.12'},
                                                  resolve=no_dns))
        self.assertEqual(set(), rbd_driver.connector_ips(None))


@ddt.ddt
class AddressParsingTestCase(testtools.TestCase):

    @ddt.unpack
    @ddt.data(('127.0.0.11:0/99', '127.0.0.11'),
              ('v2:10.0.0.1:6800/5', '10.0.0.1'),
              ('[::1]:0/5', '::1'),
              ('[v1:[fd00::2]:0/7]', 'fd00::2'))
    def test_addr_ip(self, addr, ip):
        self.assertEqual(ip, rbd_driver.addr_ip(addr))

    def test_mon_dump_current_addresses(self):
        monmap = {'fsid': 'f', 'mons': [
            {'name': 'a', 'addr': '127.0.0.2:16789/0',
             'public_addrs': {'addrvec': [
                 {'type': 'v2', 'addr': '127.0.0.2:13300'},
                 {'type': 'v1', 'addr': '127.0.0.2:16789'}]}},
            {'name': 'b', 'addr': '-',
             'public_addrs': {'addrvec': [
                 {'type': 'v2', 'addr': '[fd00::3]:3300'}]}}]}
        self.assertEqual((['127.0.0.2', 'fd00::3'], ['16789', '3300']),
                         rbd_driver.parse_mon_addrs(monmap))

    def test_blocklist_ls_output(self):
        out = b'[{"addr":"127.0.0.11:0/1","until":"x"}][]'
        self.assertEqual([{'addr': '127.0.0.11:0/1', 'until': 'x'}],
                         rbd_driver.parse_json_prefix(out))
        self.assertEqual([], rbd_driver.parse_json_prefix(b''))

    @ddt.unpack
    @ddt.data(('rbd://fsid/images/abc/snap', ('fsid', 'images', 'abc',
                                              'snap')),
              ('rbd://fsid/images/a%2Fb/snap', ('fsid', 'images', 'a/b',
                                                'snap')),
              ('rbd://fsid/images/abc', None),
              ('rbd://fsid//abc/snap', None),
              ('file:///tmp/x', None),
              (None, None))
    def test_rbd_location(self, url, expected):
        self.assertEqual(expected, rbd_driver.parse_rbd_location(url))

    def test_qemu_spec_escapes_and_has_no_key(self):
        spec = rbd_driver.qemu_rbd_spec('volumes', 'vol:1', user='cinder',
                                        conf='/etc/ceph/c.conf',
                                        keyring='/k/ring', snapshot='s@1')
        self.assertEqual('rbd:volumes/vol\\:1@s\\@1:id=cinder:'
                         'conf=/etc/ceph/c.conf:keyring=/k/ring', spec)
        self.assertNotIn(':key=', spec)


class RefreshOutputTestCase(testtools.TestCase):

    def test_secrets_masked(self):
        info = {'auth_password': 'chap', 'auth_username': 'u',
                'keyring': 'AQ==', 'secret_uuid': 'uuid', 'key': 'k',
                'nested': [{'discovery_auth_password': 'p'}],
                'hosts': ['127.0.0.2'], 'secret_type': 'ceph'}
        masked = local.mask_secrets(info)
        self.assertEqual('***', masked['auth_password'])
        self.assertEqual('***', masked['keyring'])
        self.assertEqual('***', masked['key'])
        self.assertEqual('***', masked['nested'][0]['discovery_auth_password'])
        for keep in ('auth_username', 'secret_uuid', 'hosts', 'secret_type'):
            self.assertEqual(info[keep], masked[keep])
        out = io.StringIO()
        local.emit({'connection_info': masked}, 'table', out)
        self.assertNotIn('chap', out.getvalue())
        self.assertIn('connection_info.hosts', out.getvalue())
        out = io.StringIO()
        local.emit({'connection_info': masked}, 'json', out)
        self.assertEqual(masked, json.loads(out.getvalue())[
            'connection_info'])

    def test_usage_error(self):
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', io.StringIO()))
        self.assertEqual(local.EXIT_USAGE, refresh.main_refresh([]))
        self.assertIn('ATTACHMENT_ID', sys.stderr.getvalue())

    def test_options_listed(self):
        from cinder_forcedetach import opts
        names = {o.dest for o in opts.list_opts()[0][1]}
        self.assertIn('forcedetach_rbd_blocklist_expire_seconds', names)
