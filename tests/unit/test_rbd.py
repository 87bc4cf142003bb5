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
ADDR_B2 = '127.0.0.22:0/2002'      # compute2's other address
ADDR_X = '127.0.0.99:0/9001'       # nobody's
OWN = '127.0.0.1:0/3001'


def no_dns(name):
    return []


@ddt.ddt
class SelectFenceTargetsTestCase(testtools.TestCase):

    def select(self, holders, connectors, keep=(), own=(OWN,),
               resolve=no_dns):
        return rbd_driver.select_fence_targets(holders, own, connectors,
                                               keep, resolve=resolve)

    def unexplained(self, *args, **kwargs):
        """The holders the selection refuses to decide on."""
        try:
            result = self.select(*args, **kwargs)
        except rbd_driver.UnexplainedClients as err:
            return err.clients
        self.fail('no error; selected %s' % (result,))

    def test_every_host_but_never_ourselves(self):
        targets, spared = self.select([ADDR_A, ADDR_B, OWN], [None])
        self.assertEqual([ADDR_A, ADDR_B], targets)
        self.assertEqual([(OWN, 'this driver')], spared)

    def test_no_attachment_stays_every_other_holder_is_fenced(self):
        """Nothing in Cinder explains any client: whatever its IP."""
        targets, spared = self.select(
            [ADDR_A, ADDR_B, ADDR_A2, ADDR_X, OWN], [A])
        self.assertEqual(sorted([ADDR_A, ADDR_A2, ADDR_B, ADDR_X]), targets)
        self.assertEqual([(OWN, 'this driver')], spared)

    def test_multiattach_keeps_the_attachment_that_stays(self):
        for connectors in ([A], [None]):
            targets, spared = self.select([ADDR_A, ADDR_B, OWN], connectors,
                                          keep=[B])
            self.assertEqual([ADDR_A], targets)
            self.assertEqual({(ADDR_B, 'an attachment that stays'),
                              (OWN, 'this driver')}, set(spared))

    def test_unexplained_client_fails(self):
        """compute2's client at an address its connector does not name."""
        clients = self.unexplained([ADDR_A, ADDR_B, ADDR_B2, OWN], [A],
                                   keep=[B])
        self.assertEqual([(ADDR_B2, rbd_driver.UNEXPLAINED)], clients)

    def test_ambiguous_client_fails(self):
        """Two hosts claim one IP: fencing or sparing could be wrong."""
        twin = {'host': 'compute3', 'ip': '127.0.0.11'}
        clients = self.unexplained([ADDR_A, OWN], [A], keep=[twin])
        self.assertEqual([(ADDR_A, rbd_driver.AMBIGUOUS)], clients)

    def test_attachment_without_connector_explains_nothing(self):
        """A kept attachment with no connector (legacy attach)."""
        clients = self.unexplained([ADDR_A, ADDR_B], [A], keep=[None])
        self.assertEqual([(ADDR_B, rbd_driver.UNEXPLAINED)], clients)
        # and a detached one without connector explains nothing either
        clients = self.unexplained([ADDR_A, ADDR_B], [], keep=[B])
        self.assertEqual([(ADDR_A, rbd_driver.UNEXPLAINED)], clients)

    def test_host_keeping_another_attachment_is_not_detached(self):
        """Two attachments from one host: keeping one keeps its access."""
        targets, spared = self.select([ADDR_A], [A], keep=[dict(A)])
        self.assertEqual([], targets)
        self.assertEqual([(ADDR_A, 'an attachment that stays')], spared)

    def test_host_names_resolve_to_every_address(self):
        dns = {'compute1': ['127.0.0.11', '127.0.0.21'],
               'compute2': ['127.0.0.12', '127.0.0.22']}.get
        addr_a3 = '127.0.0.21:0/1003'
        targets, spared = self.select([ADDR_A, addr_a3, ADDR_B2, OWN], [A],
                                      keep=[B], resolve=dns)
        self.assertEqual([ADDR_A, addr_a3], targets)
        self.assertEqual({(ADDR_B2, 'an attachment that stays'),
                          (OWN, 'this driver')}, set(spared))

    @ddt.data('v1:127.0.0.11:0/1001', '[v1:127.0.0.11:0/1001]',
              'any:127.0.0.11:0/1001', ' 127.0.0.11:0/1001 ')
    def test_address_forms_and_duplicates(self, form):
        targets, _spared = self.select([form, ADDR_A], [A], keep=[B])
        self.assertEqual([ADDR_A], targets)

    def test_nothing_holds_it(self):
        self.assertEqual(([], []), self.select([], [A], keep=[B]))

    def test_connector_ips(self):
        def dns(name):
            return {'compute1': ['127.0.0.21', '::1']}.get(name, [])
        self.assertEqual({'127.0.0.12'},
                         rbd_driver.connector_ips({'host': '127.0.0.12'},
                                                  resolve=self.fail))
        self.assertEqual({'127.0.0.11', '127.0.0.21', '::1'},
                         rbd_driver.connector_ips(A, resolve=dns))
        self.assertEqual({'127.0.0.21', '::1'},
                         rbd_driver.connector_ips({'host': 'compute1'},
                                                  resolve=dns))
        self.assertEqual({'127.0.0.12'},
                         rbd_driver.connector_ips(B, resolve=dns))
        self.assertEqual(set(), rbd_driver.connector_ips(None))

    def test_unexplained_error_names_the_client_and_the_way_out(self):
        err = rbd_driver.UnexplainedClients(
            [(ADDR_B2, rbd_driver.UNEXPLAINED)])
        reason = rbd_driver._unexplained(err, [
            ('watcher', ADDR_B2), ('lock owner', 'v1:' + ADDR_B2),
            ('watcher', ADDR_A)])
        self.assertIn('client %s (lock owner, watcher)' % ADDR_B2, reason)
        self.assertIn(rbd_driver.UNEXPLAINED, reason)
        self.assertNotIn(ADDR_A, reason)
        self.assertIn('nothing was fenced', reason)
        self.assertIn('without a connector', reason)
        self.assertIn('refresh', reason)


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
