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

"""The conformance checks: one test per check, named after its rule.

========  ===============================================================
rule      what the driver must guarantee
========  ===============================================================
R1        every hook run again gives the same end state (each step run
          10 times: revoke one host, revoke every host, remove_export,
          fence_clients when the driver fences)
R2        ``revoke_host_access(volume, None)`` tears down every host;
          after ``remove_export`` nothing is exported
R3        a host Cinder keeps keeps its access (multiattach)
R4        a hook that fails leaves Cinder's database unchanged, and the
          error names the step
R5        a crash after any step's backend call, then a re-run, converges
          (the crash is a real process death: see :func:`run_in_child`)
R6        bad connectors are refused, through Cinder's API, before
          anything is exported
R7        the probe says a detached host lost its access
R8        no second writer after a reset of the state: host 1 attached
          (a live session or client), ``os-reset_status`` (Cinder's rows
          only), host 2 attaches through Cinder's API: host 1 has no
          access left and a write it tries then does not land (the grant
          must cut what no live attachment explains: ``volume_holders``)
R9        a host fence (``fence_host``: a dead or partitioned host off
          every volume at once, for evacuation) cuts host 1 off its own
          volume and off a shared one, resets their rows, leaves host 2
          its access and attachment (multiattach); a second call succeeds
          and changes nothing
========  ===============================================================

A check is ``test_R<n>_<what>``; its failure message starts with the
rule (``R1 idempotent revoke_host_access(one host): call 2/10 raised
...``).  A check the driver's capabilities exclude is skipped with a
reason starting ``n/a (capability``.

Where the probe makes live clients (:meth:`~.probe.AccessProbe.connect`:
tgt sessions, RBD clients), every attached host holds one, so "no access"
means no grant *and* no live session or client.

On a driver that fences (``fencing``), a host's teardown is
``revoke_host_access`` then ``fence_clients``, as in the flow: the checks
that call the hooks themselves and then ask whether a host lost its access
(R1, R2) fence before they ask.
"""

import os
import signal
import tempfile
import time
import traceback

import eventlet
import fixtures

from cinder.tests.functional.api import client
from cinder_forcedetach.conformance import harness
from cinder_forcedetach.conformance import probe as probe_mod
from cinder_forcedetach import exception as fd_exception

REPEAT = 10
HOST1 = 'conformance-host1'
HOST2 = 'conformance-host2'

RULES = {
    'R1': 'idempotent hooks',
    'R2': 'connector None tears down every host',
    'R3': 'a host Cinder keeps keeps its access',
    'R4': 'a failed hook leaves the DB unchanged and names its step',
    'R5': 'crash at any step, then re-run converges',
    'R6': 'bad connectors refused before anything is exported',
    'R7': 'a detached host loses access',
    'R8': 'no second writer after a reset of the state',
    'R9': 'a host fence cuts one host off every volume',
}

# The flow's task that calls each hook (ForceDetachFailed names it).
STEPS = {'revoke_host_access': 'RevokeHostAccessTask',
         'fence_clients': 'FenceClientsTask',
         'remove_export': 'RemoveExportTask'}

HOSTILE_COMMON = (
    {'host': 'conformance-bad\ninitiator-address=ALL'},
    {'host': 'conformance-bad,initiator-address=ALL'},
)
HOSTILE = {
    'iscsi': (
        {'initiator': 'iqn.2004-10.com.x:a,initiator-address=ALL'},
        {'initiator': 'ALL'},
        {'initiator': 'iqn.2004-10.com.x:b\ninitiator-address=ALL'},
        {'initiator': 'iqn.2004-10.com.x:c initiator-address=ALL'},
        {'initiator': ''},
    ),
    'fc': (
        {'wwpns': ['50014380186af83c,initiator-address=ALL']},
        {'wwpns': ['ALL']},
        {'wwpns': ['zz00000000000000']},
        {'wwpns': ['5001438018\n6af83c']},
        {'wwpns': '50014380186af83c'},
        {'wwpns': []},
    ),
    'rbd': (
        {'ip': 'ALL'},
        {'ip': '127.0.0.1\n0.0.0.0/0'},
    ),
}


# R8: the servers of the two hosts.  After a status-only reset the first
# host's attachment stays live: only an attachment of another server is
# one the reset left behind (see cinder_forcedetach.grant_fence).
INSTANCE1 = '11111111-1111-4111-8111-111111111111'
INSTANCE2 = '22222222-2222-4222-8222-222222222222'
# R8: the bytes each host writes (one block each; block 0 is the probe's).
CONTROL, LATE, SECOND = 0xa1, 0xa7, 0xb2


class InjectedFault(Exception):
    """R4: the fault the kit injects into a hook."""


#: R5: the exit status of a child that died where the kit made it die.
CRASH_EXIT = 77
#: R5: the exit status of a child whose force_detach raised first.
CHILD_RAISED = 70
#: R5: seconds the crashing child may take before it is killed.
CHILD_TIMEOUT = 120


def run_in_child(fn, timeout=CHILD_TIMEOUT):
    """Run *fn* in a forked child; ``(exit status, traceback text)``.

    The child exits 0 when *fn* returns, :data:`CHILD_RAISED` when it
    raises (its traceback is returned), or whatever ``os._exit`` *fn*
    calls; a child still running after *timeout* seconds is killed
    (status ``-SIGKILL``).

    Why this is sound with the state a parent has:

    * Cinder's database is a SQLite file (the harness's), and oslo.db
      checks a pooled connection's pid on checkout: the child opens its
      own connections instead of using the parent's.
    * *fn* runs in a new native thread of the child, not in the thread
      that forked: Ceph draws client nonces from a thread-local generator
      that fork copies, so a client the child creates in the forking
      thread gets the address of the parent's next client (the parent's
      re-run would then mistake the crashed run's watch for its own).  A
      new thread also starts with an eventlet hub of its own; eventlet's
      thread pool does not survive fork, so *fn* must not need it (our
      Ceph layer calls librados directly, in bounded time).
    * The kit keeps no librados connection open (the probe connects per
      read), and our Ceph layer and upstream's driver connect per
      operation: the child inherits no live cluster session to reuse.
      What fork cannot make safe, a lock held at that instant by another
      thread inside a library, would hang the child: the timeout then
      kills it and the check fails saying so, it never hangs the kit.
    """
    fd, report = tempfile.mkstemp(prefix='conformance-child-')
    os.close(fd)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        code = [CHILD_RAISED]

        def body():
            try:
                fn()
                code[0] = 0
            except BaseException:
                with open(report, 'w') as f:
                    f.write(traceback.format_exc())

        try:
            thread = eventlet.patcher.original('threading').Thread(
                target=body)
            thread.start()
            thread.join()
        finally:
            os._exit(code[0])
    try:
        deadline = time.monotonic() + timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                _done, status = os.waitpid(pid, 0)
                break
            time.sleep(0.02)
        with open(report) as f:
            why = f.read()
    finally:
        os.unlink(report)
    return os.waitstatus_to_exitcode(status), why


def _describe(err):
    text = str(err).strip().splitlines()
    return '%s: %s' % (type(err).__name__, text[0] if text else '')


class ConformanceChecks(harness.CinderHarness):
    """Every check; a subclass (see :func:`case_class`) sets ``target``."""

    rule = None

    def setUp(self):
        #: what :meth:`note` recorded (the runner puts it in the row).
        self._notes = []
        super(ConformanceChecks, self).setUp()

    # -- helpers -------------------------------------------------------------

    def fail_rule(self, message):
        self.fail('%s: %s' % (self.rule, message))

    def note(self, text):
        """Text for the check's row in the report, also when it passes."""
        self._notes.append(text)

    def expect(self, condition, message):
        if not condition:
            self.fail_rule(message)

    def call(self, what, fn, *args, **kwargs):
        """Run a hook; a raise fails the check, naming the rule and hook."""
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            self.fail_rule('%s raised %s' % (what, _describe(err)))

    def need(self, capability):
        if not self.caps.get(capability):
            self.skipTest('n/a (capability: the driver does not declare '
                          '%s)' % capability)

    def access(self, volume_id, host):
        return bool(self.probe.host_has_access(
            self.driver, self.db_volume(volume_id), self.connector(host)))

    def exported(self, volume_id):
        return bool(self.probe.exported(self.driver,
                                        self.db_volume(volume_id)))

    def connect_host(self, volume_id, host, attachment):
        """The probe's :meth:`~.probe.AccessProbe.connect` for *host*."""
        # Registered after the volume's backend cleanup, so it runs first
        # (a client holding an image keeps it from being deleted).
        connect = getattr(self.probe, 'connect', None)
        if not callable(connect):
            return      # a probe that is no AccessProbe subclass
        self.addCleanup(self._disconnect_clients)
        try:
            connect(self.driver, self.db_volume(volume_id),
                    self.connector(host), attachment.get('connection_info'))
        except Exception as err:
            self.fail_rule('precondition: the probe could not connect %s '
                           '(a live client of its attachment): %s' % (
                               host, _describe(err)))

    def _disconnect_clients(self):
        disconnect = getattr(self.probe, 'disconnect_all', None)
        if callable(disconnect):
            disconnect()

    def fence(self, volume, connectors, keep=()):
        """``fence_clients`` as the flow calls it, when the driver fences.

        Returns the text the checks add to their messages.
        """
        if not self.caps.get('fencing'):
            return ''
        what = 'fence_clients(volume, [%s], [])' % ', '.join(
            c['host'] if c else 'None' for c in connectors)
        self.call(what, self.driver.fence_clients, volume, list(connectors),
                  list(keep))
        return ' and ' + what

    def new_volume(self, multiattach=False):
        volume_id = self.create_volume(multiattach=multiattach)
        self.addCleanup(self._cleanup_backend, volume_id)
        return volume_id

    def _cleanup_backend(self, volume_id):
        """Best effort: leave the vendor's backend as we found it."""
        volume = self.db_volume(volume_id)
        for step in (lambda: self.driver.revoke_host_access(volume, None),
                     lambda: self.driver.remove_export(self.ctxt, volume),
                     lambda: self.driver.delete_volume(volume)):
            try:
                step()
            except Exception:
                pass

    def attached(self, hosts=(HOST1,)):
        """A volume attached through Cinder's API to *hosts*.

        Returns ``(volume_id, {host: attachment})``; checks the probe
        sees every host's access (else the probe or the driver is wrong
        and no check could mean anything).
        """
        volume_id = self.new_volume(multiattach=len(hosts) > 1)
        attachments = {}
        for host in hosts:
            try:
                attachments[host] = self.attach(volume_id, host)
            except Exception as err:
                self.fail_rule('precondition: attaching %s through Cinder\'s '
                               'API failed: %s' % (host, _describe(err)))
            self.connect_host(volume_id, host, attachments[host])
        for host in hosts:
            self.expect(self.access(volume_id, host),
                        'precondition: the probe says %s has no access right '
                        'after its attachment (probe or '
                        'initialize_connection wrong)' % host)
        self.expect(self.exported(volume_id), 'precondition: the probe says '
                    'the attached volume is not exported')
        return volume_id, attachments

    def hosts_for(self):
        return (HOST1, HOST2) if self.caps.get('multiattach') else (HOST1,)

    def repeat(self, what, fn, state, compare_result=True):
        """Run *fn* REPEAT times; every end state equals the first.

        The end state is *fn*'s result and ``state()``; without
        *compare_result* only ``state()`` (a hook whose result reports
        what that very call did, as ``fence_clients``'s does).
        """
        first = None
        for n in range(1, REPEAT + 1):
            try:
                result = fn()
            except Exception as err:
                self.fail_rule('call %d/%d of %s raised %s' % (
                    n, REPEAT, what, _describe(err)))
            now = (result if compare_result else None, state())
            if first is None:
                first = now
            elif now != first:
                self.fail_rule('call %d/%d of %s ended in %r, call 1 in %r'
                               % (n, REPEAT, what, now, first))
        return first

    def assert_detached(self, volume_id, hosts):
        vol = self.db_volume(volume_id)
        self.expect((vol.status, vol.attach_status) ==
                    ('available', 'detached') and
                    not vol.volume_attachment,
                    'volume is %s/%s with %d attachment(s), wanted '
                    'available/detached' % (vol.status, vol.attach_status,
                                            len(vol.volume_attachment)))
        for host in hosts:
            self.expect(not self.access(volume_id, host),
                        'the probe says %s still has access' % host)
        self.expect(not self.exported(volume_id),
                    'the probe says the volume is still exported')

    # -- R1 -------------------------------------------------------------------

    def test_R1_idempotent_revoke_one_host(self):
        self.rule = 'R1 idempotent revoke_host_access(one host)'
        volume_id, _atts = self.attached()
        volume = self.db_volume(volume_id)
        connector = self.connector(HOST1)
        self.repeat('revoke_host_access(volume, %s)' % HOST1,
                    lambda: self.driver.revoke_host_access(volume, connector),
                    lambda: (self.access(volume_id, HOST1),
                             self.exported(volume_id)))
        fenced = self.fence(volume, [connector])
        self.expect(not self.access(volume_id, HOST1),
                    'the probe says %s kept its access after '
                    'revoke_host_access(volume, %s)%s' % (HOST1, HOST1,
                                                          fenced))

    def test_R1_idempotent_revoke_every_host(self):
        self.rule = 'R1 idempotent revoke_host_access(None)'
        hosts = self.hosts_for()
        volume_id, _atts = self.attached(hosts)
        volume = self.db_volume(volume_id)
        self.repeat('revoke_host_access(volume, None)',
                    lambda: self.driver.revoke_host_access(volume, None),
                    lambda: tuple(self.access(volume_id, h) for h in hosts))

    def test_R1_idempotent_remove_export(self):
        self.rule = 'R1 idempotent remove_export'
        volume_id, _atts = self.attached()
        volume = self.db_volume(volume_id)
        self.call('revoke_host_access(volume, None)',
                  self.driver.revoke_host_access, volume, None)
        self.fence(volume, [None])
        self.repeat('remove_export',
                    lambda: self.driver.remove_export(self.ctxt, volume),
                    lambda: (self.exported(volume_id),
                             self.access(volume_id, HOST1)))

    def test_R1_idempotent_fence_clients(self):
        self.rule = 'R1 idempotent fence_clients'
        self.need('fencing')
        volume_id, _atts = self.attached()
        volume = self.db_volume(volume_id)
        connector = self.connector(HOST1)
        self.call('revoke_host_access(volume, %s)' % HOST1,
                  self.driver.revoke_host_access, volume, connector)
        # What a call returns is what that call fenced: the second finds
        # nothing left to fence.  Only the end state must repeat.
        _result, (access, _exported) = self.repeat(
            'fence_clients(volume, [%s], [])' % HOST1,
            lambda: self.driver.fence_clients(volume, [connector], []),
            lambda: (self.access(volume_id, HOST1),
                     self.exported(volume_id)),
            compare_result=False)
        self.expect(not access, 'the probe says %s kept its access after '
                    'fence_clients' % HOST1)

    # -- R2 -------------------------------------------------------------------

    def test_R2_revoke_none_tears_down_every_host(self):
        self.rule = 'R2 connector None tears down every host'
        hosts = self.hosts_for()
        volume_id, _atts = self.attached(hosts)
        volume = self.db_volume(volume_id)
        self.call('revoke_host_access(volume, None)',
                  self.driver.revoke_host_access, volume, None)
        fenced = self.fence(volume, [None])
        for host in hosts:
            self.expect(not self.access(volume_id, host),
                        'after revoke_host_access(volume, None)%s the probe '
                        'says %s still has access' % (fenced, host))
        self.call('remove_export', self.driver.remove_export, self.ctxt,
                  volume)
        self.expect(not self.exported(volume_id), 'after revoke_host_access'
                    '(volume, None)%s and remove_export the probe says the '
                    'backend still exports the volume' % fenced)

    def test_R2_force_detach_every_host(self):
        self.rule = 'R2 connector None tears down every host'
        hosts = self.hosts_for()
        volume_id, _atts = self.attached(hosts)
        self.call('force_detach(volume) (no connector, no attachment)',
                  self.driver.force_detach, self.ctxt,
                  self.db_volume(volume_id))
        self.assert_detached(volume_id, hosts)

    # -- R3 -------------------------------------------------------------------

    def _assert_host2_kept(self, volume_id, att2):
        self.expect(not self.access(volume_id, HOST1),
                    'the probe says %s still has access' % HOST1)
        self.expect(self.access(volume_id, HOST2), 'the probe says %s, '
                    'whose attachment Cinder keeps, lost its access' % HOST2)
        self.expect(self.exported(volume_id), 'the probe says the volume '
                    'is no longer exported while %s keeps it' % HOST2)
        vol = self.db_volume(volume_id)
        self.expect(vol.status == 'in-use' and
                    [a.id for a in vol.volume_attachment] == [att2['id']],
                    'Cinder has %s with attachments %s, wanted in-use with '
                    '%s only' % (vol.status,
                                 [a.id for a in vol.volume_attachment],
                                 att2['id']))

    def test_R3_force_detach_one_host_keeps_the_other(self):
        self.rule = 'R3 a host Cinder keeps keeps its access'
        self.need('multiattach')
        volume_id, atts = self.attached((HOST1, HOST2))
        self.call('force_detach(volume, connector=%s)' % HOST1,
                  self.driver.force_detach, self.ctxt,
                  self.db_volume(volume_id), self.connector(HOST1))
        self._assert_host2_kept(volume_id, atts[HOST2])

    def test_R3_attachment_delete_keeps_the_other(self):
        self.rule = 'R3 a host Cinder keeps keeps its access'
        self.need('multiattach')
        volume_id, atts = self.attached((HOST1, HOST2))
        try:
            self.api.api_delete('/attachments/%s' % atts[HOST1]['id'])
        except Exception as err:
            self.fail_rule('DELETE /attachments/<%s> (Cinder\'s own '
                           'terminate_connection) failed: %s' % (
                               HOST1, _describe(err)))
        self._assert_host2_kept(volume_id, atts[HOST2])

    # -- R4 -------------------------------------------------------------------

    def _hook_attr(self, hook):
        # The flow calls remove_export through remove_export_unlocked (the
        # mixin wraps remove_export in the volume's lock).
        if hook == 'remove_export' and hasattr(self.driver,
                                               'remove_export_unlocked'):
            return 'remove_export_unlocked'
        return hook

    def _fault(self, hook):
        self.rule = 'R4 failed %s leaves the DB unchanged' % hook
        volume_id, atts = self.attached()
        before = self.db_state(volume_id)
        attr = self._hook_attr(hook)

        def failing(*args, **kwargs):
            raise InjectedFault('fault injected into %s' % hook)

        patch = _InstancePatch(self.driver, attr, failing)
        patch.setUp()
        try:
            self.driver.force_detach(self.ctxt, self.db_volume(volume_id),
                                     attachment_id=atts[HOST1]['id'])
        except fd_exception.ForceDetachFailed as err:
            step = err.kwargs.get('step')
            self.expect(step == STEPS[hook] and STEPS[hook] in str(err),
                        'ForceDetachFailed names step %r (%s), wanted %s' % (
                            step, err, STEPS[hook]))
        except Exception as err:
            self.fail_rule('force_detach raised %s, not ForceDetachFailed '
                           'naming %s' % (_describe(err), STEPS[hook]))
        else:
            self.fail_rule('force_detach succeeded although %s failed' %
                           hook)
        finally:
            patch.cleanUp()
        after = self.db_state(volume_id)
        self.expect(before == after, 'Cinder\'s database changed: %r -> %r'
                    % (before, after))

    def test_R4_fault_in_revoke_host_access(self):
        self._fault('revoke_host_access')

    def test_R4_fault_in_fence_clients(self):
        self._fault('fence_clients')

    def test_R4_fault_in_remove_export(self):
        self._fault('remove_export')

    # -- R5 -------------------------------------------------------------------

    def _crash(self, hook):
        """force_detach in a child that dies right after *hook* returned."""
        self.rule = 'R5 crash after %s, then re-run' % hook
        volume_id, atts = self.attached()
        attr = self._hook_attr(hook)
        attachment_id = atts[HOST1]['id']

        def crashing_force_detach():
            original = getattr(self.driver, attr)

            def crashing(*args, **kwargs):
                original(*args, **kwargs)
                os._exit(CRASH_EXIT)

            setattr(self.driver, attr, crashing)
            self.driver.force_detach(self.ctxt, self.db_volume(volume_id),
                                     attachment_id=attachment_id)

        code, why = run_in_child(crashing_force_detach)
        if code != CRASH_EXIT:
            if code == 0:
                what = 'returned without calling %s' % hook
            elif code == CHILD_RAISED:
                last = (why.strip().splitlines() or ['?'])[-1]
                what = 'raised before the crash: %s' % last
            elif code == -signal.SIGKILL:
                what = 'hung for %d s and was killed' % CHILD_TIMEOUT
            else:
                what = 'exited %s' % code
            self.fail_rule('force_detach in the crashing child %s' % what)
        self.call('re-run force_detach', self.driver.force_detach,
                  self.ctxt, self.db_volume(volume_id),
                  attachment_id=attachment_id)
        self.assert_detached(volume_id, (HOST1,))

    def test_R5_crash_after_revoke_host_access(self):
        self._crash('revoke_host_access')

    def test_R5_crash_after_fence_clients(self):
        self._crash('fence_clients')

    def test_R5_crash_after_remove_export(self):
        self._crash('remove_export')

    # -- R6 -------------------------------------------------------------------

    def hostile_connectors(self):
        fields = HOSTILE_COMMON + HOSTILE.get(self.caps.get('protocol'), ())
        for extra in fields:
            connector = self.connector(HOST1)
            connector.update(extra)
            yield connector, extra

    def _refused(self, volume_id, extra, send):
        """Send a hostile connector: refused, and nothing exported to it.

        Returns ``(HTTP status, what Cinder's database has then)``.  The
        status is not the proof: Cinder answers 500 to any error of the
        volume service, an input error of the driver on attachment create
        as well as an ``initialize_connection`` that failed after
        ``create_export`` made the export.  So whatever the status (400 or
        500), the probe reads the backend: the volume is not exported (no
        target, mapping or client) and the hostile host has no access (no
        ACL entry, session or grant).
        """
        try:
            send()
        except client.OpenStackApiException as err:
            status = err.response.status_code
        else:
            self.fail_rule('Cinder\'s API accepted connector %r' % (extra,))
        self.expect(status in (400, 500), 'connector %r got HTTP %s' % (
            extra, status))
        what = ('got HTTP 500 (an error, not a refusal as such)'
                if status == 500 else 'was refused (HTTP %s)' % status)
        bad = self.connector(HOST1)
        bad.update(extra)
        volume = self.db_volume(volume_id)
        self.expect(not self.probe.exported(self.driver, volume),
                    'connector %r %s and the probe says the volume is '
                    'exported' % (extra, what))
        self.expect(not self.probe.host_has_access(self.driver, volume, bad),
                    'connector %r %s and the probe says that host has '
                    'access' % (extra, what))
        return status, (volume.status, tuple(sorted(
            a.attach_status for a in volume.volume_attachment)))

    def _note_refusals(self, call, seen):
        """The pass row's text: the statuses seen and what Cinder left.

        *seen*: ``[(status, (volume status, attachment statuses))]``.
        """
        counts = {}
        for status, _db in seen:
            counts[status] = counts.get(status, 0) + 1
        text = ', '.join('HTTP %s x%d' % kv for kv in sorted(counts.items()))
        left = sorted({db for status, db in seen if status == 500})
        if left:
            volume = '/'.join(sorted({v for v, _a in left}))
            text += (', volume left %s (attachment %s): Cinder maps a '
                     'driver\'s input error on %s to HTTP 500 and leaves the '
                     'volume %s; no refusal as such' % (
                         volume, '/'.join(sorted({','.join(a) or 'none'
                                                  for _v, a in left})),
                         call, volume))
        self.note('%s; the probe read the backend: nothing exported to the '
                  '%d connectors' % (text, len(seen)))

    def test_R6_attachment_create_refuses_bad_connectors(self):
        self.rule = 'R6 bad connector refused (attachment create)'
        seen = []
        for connector, extra in self.hostile_connectors():
            volume_id = self.new_volume()
            seen.append(self._refused(
                volume_id, extra, lambda: self.api.api_post(
                    '/attachments', {'attachment': {
                        'volume_uuid': volume_id, 'connector': connector}})))
        self._note_refusals('attachment create', seen)

    def test_R6_attachment_update_refuses_bad_connectors(self):
        self.rule = 'R6 bad connector refused (attachment update)'
        volume_id = self.new_volume()
        att = self.reserve(volume_id)
        seen = []
        for connector, extra in self.hostile_connectors():
            seen.append(self._refused(volume_id, extra,
                                      lambda: self.update_attachment(
                                          att['id'], connector)))
        self._note_refusals('attachment update', seen)

    # -- R7 -------------------------------------------------------------------

    def test_R7_force_detach_by_connector(self):
        self.rule = 'R7 detached host loses access (by connector)'
        volume_id, _atts = self.attached()
        self.call('force_detach(volume, connector=%s)' % HOST1,
                  self.driver.force_detach, self.ctxt,
                  self.db_volume(volume_id), self.connector(HOST1))
        self.expect(not self.access(volume_id, HOST1),
                    'the probe says %s still has access' % HOST1)

    def test_R7_force_detach_by_attachment_id(self):
        self.rule = 'R7 detached host loses access (by attachment id)'
        volume_id, atts = self.attached()
        self.call('force_detach(volume, attachment_id=<%s>)' % HOST1,
                  self.driver.force_detach, self.ctxt,
                  self.db_volume(volume_id),
                  attachment_id=atts[HOST1]['id'])
        self.assert_detached(volume_id, (HOST1,))

    # -- R8 -------------------------------------------------------------------

    def block_io(self, method, volume_id, host, block, *pattern):
        """The probe's ``write_block``/``read_block`` at block *block*.

        Raises NotImplementedError when the probe has no block I/O; a raise
        of the probe fails the check.
        """
        fn = getattr(self.probe, method, None)
        if not callable(fn):
            raise NotImplementedError()
        try:
            return fn(self.driver, self.db_volume(volume_id),
                      self.connector(host), block * probe_mod.BLOCK,
                      *pattern)
        except NotImplementedError:
            raise
        except Exception as err:
            self.fail_rule('the probe\'s %s(%s, block %d) raised %s' % (
                method, host, block, _describe(err)))

    def _second_writer(self, reset, instances=(None, None)):
        """Host 1 attached and live, *reset*, then host 2 attaches."""
        what = 'os-reset_status {%s}' % ', '.join(
            '%s: %s' % kv for kv in reset.items())
        volume_id = self.new_volume()
        try:
            att1 = self.attach(volume_id, HOST1, instance=instances[0])
        except Exception as err:
            self.fail_rule('precondition: attaching %s through Cinder\'s '
                           'API failed: %s' % (HOST1, _describe(err)))
        self.connect_host(volume_id, HOST1, att1)
        self.expect(self.access(volume_id, HOST1),
                    'precondition: the probe says %s has no access right '
                    'after its attachment (probe or initialize_connection '
                    'wrong)' % HOST1)
        try:
            self.reset_status(volume_id, **reset)
        except Exception as err:
            self.fail_rule('precondition: %s failed: %s' % (
                what, _describe(err)))
        status = self.db_volume(volume_id).status
        self.expect(status == 'available', 'precondition: after %s Cinder '
                    'has the volume %s' % (what, status))
        self.expect(self.access(volume_id, HOST1),
                    'precondition: the probe says %s lost its access with %s '
                    'alone (a reset changes only Cinder\'s rows)' % (
                        HOST1, what))
        block = bytes([CONTROL]) * probe_mod.BLOCK
        try:
            wrote = self.block_io('write_block', volume_id, HOST1, 1,
                                  CONTROL)
        except NotImplementedError:
            io = False          # no live clients: access alone
        else:
            io = True
            read = self.block_io('read_block', volume_id, HOST1, 1)
            self.expect(wrote is True and read == block,
                        'precondition: %s\'s live client could not write '
                        'block 1 after %s (write %r, read back %s)' % (
                            HOST1, what, wrote, _what_read(read, block)))

        try:
            att2 = self.attach(volume_id, HOST2, instance=instances[1])
        except Exception as err:
            self.fail_rule('after %s the attachment of %s through Cinder\'s '
                           'API failed: %s (the grant must cut what no live '
                           'attachment explains, then grant)' % (
                               what, HOST2, _describe(err)))
        self.connect_host(volume_id, HOST2, att2)

        problems = []
        if self.access(volume_id, HOST1):
            problems.append('the probe says %s still has access (a grant, '
                            'session or client no live attachment '
                            'explains)' % HOST1)
        if io:
            late = bytes([LATE]) * probe_mod.BLOCK
            wrote = self.block_io('write_block', volume_id, HOST1, 2, LATE)
            read = self.block_io('read_block', volume_id, HOST2, 2)
            if wrote:
                problems.append('%s\'s live client wrote block 2 after the '
                                'grant and the backend acknowledged it' %
                                HOST1)
            if read == late:
                problems.append('block 2 on the backend is what %s wrote'
                                % HOST1)
            elif read is None:
                problems.append('the probe could not read block 2 through '
                                '%s' % HOST2)
        if problems:
            self.fail_rule('after %s and the attachment of %s: %s' % (
                what, HOST2, '; '.join(problems)))
        self.expect(self.access(volume_id, HOST2), 'after %s the probe says '
                    '%s has no access right after its attachment' % (
                        what, HOST2))
        if io:
            block = bytes([SECOND]) * probe_mod.BLOCK
            wrote = self.block_io('write_block', volume_id, HOST2, 3, SECOND)
            read = self.block_io('read_block', volume_id, HOST2, 3)
            self.expect(wrote is True and read == block,
                        '%s\'s live client could not write block 3 after '
                        'its grant (write %r, read back %s)' % (
                            HOST2, wrote, _what_read(read, block)))

    def test_R8_reset_state_then_attach_elsewhere(self):
        self.rule = 'R8 no second writer after a reset of the state'
        self._second_writer({'status': 'available',
                             'attach_status': 'detached'})

    def test_R8_status_only_reset_then_attach_elsewhere(self):
        self.rule = 'R8 no second writer after a status-only reset'
        self._second_writer({'status': 'available'}, (INSTANCE1, INSTANCE2))

    # -- R9 -------------------------------------------------------------------

    def _fence_host1(self, volume_ids, call):
        what = 'fence_host(%s, %d volumes) (call %d)' % (
            HOST1, len(volume_ids), call)
        report = self.call(what, self.driver.fence_host, self.ctxt,
                           self.connector(HOST1),
                           [self.db_volume(v) for v in volume_ids])
        self.expect(not report.failed and
                    sorted(report.done) == sorted(volume_ids),
                    '%s: done %s, failed %s; wanted every volume done' % (
                        what, sorted(report.done), {
                            vid: _describe(err)
                            for vid, err in report.failed.items()}))
        return what

    def test_R9_host_fence_cuts_one_host_off_every_volume(self):
        self.rule = 'R9 a host fence cuts one host off every volume'
        own, _atts = self.attached()
        hosts = self.hosts_for()
        shared, atts = self.attached(hosts)
        for call in (1, 2):     # the second finds nothing and succeeds
            what = self._fence_host1([own, shared], call)
            self.assert_detached(own, (HOST1,))
            if HOST2 not in hosts:
                self.assert_detached(shared, (HOST1,))
                continue
            self.expect(not self.access(shared, HOST1), 'after %s the probe '
                        'says %s still has access to the shared volume' % (
                            what, HOST1))
            self._assert_host2_kept(shared, atts[HOST2])
        self.note('%d volume(s), %s' % (
            2, 'one shared with %s, which kept it' % HOST2
            if HOST2 in hosts else 'no multiattach'))


def _what_read(read, wanted):
    if read is None:
        return 'nothing (the read failed)'
    if read == wanted:
        return 'what it wrote'
    return '%d bytes, not what it wrote (first %r)' % (len(read), read[:8])


class _InstancePatch(fixtures.Fixture):
    """Replace one attribute of one driver instance, then restore it."""

    def __init__(self, obj, attr, value):
        super(_InstancePatch, self).__init__()
        self.obj, self.attr, self.value = obj, attr, value

    def _setUp(self):
        had = self.attr in vars(self.obj)
        old = vars(self.obj).get(self.attr)
        setattr(self.obj, self.attr, self.value)

        def restore():
            if had:
                setattr(self.obj, self.attr, old)
            else:
                delattr(self.obj, self.attr)
        self.addCleanup(restore)


def case_class(target):
    """The checks bound to *target* (a :class:`~.harness.Target`)."""
    name = 'Conformance_%s' % ''.join(
        c if c.isalnum() else '_' for c in str(target))
    return type(name, (ConformanceChecks,), {'target': target,
                                             '__module__': __name__})


def rule_of(test_name):
    """'test_R4_fault_in_remove_export' -> ('R4', 'fault_in_remove_export')."""
    name = test_name.split('.')[-1]
    if name.startswith('test_R'):
        rule, _sep, check = name[len('test_'):].partition('_')
        return rule, check
    return '?', name
