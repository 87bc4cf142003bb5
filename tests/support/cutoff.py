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

"""The one check that a live iSCSI initiator was cut off, proven positively.

A cut-off is never inferred from silence: an initiator that hangs, is
stopped or has died writes nothing either.  So:

* :func:`control_write`, right before the teardown, on the same session:
  the write must be answered (``WROTE``) and land on the backing store;
* :func:`assert_cut_off`, after the teardown: the session's next write
  (or read) must get a positive refusal from the target --
  :attr:`~cinder_forcedetach.conformance.initiator.Outcome.IO_ERROR`,
  ``LOGIN_REFUSED`` or ``RECONNECT_REFUSED`` (libiscsi logged tgtd
  refusing the session's re-login: what a tgt cut gives, see the
  initiator module's docstring) -- and no byte of its pattern may reach
  the backing store, read directly (file or LV file) at that offset,
  where the control write's bytes must still be (so the reader reads the
  right thing).  A ``TIMED_OUT``, ``PROCESS_GONE`` or any other answer
  fails, with the initiator's last output in the message.
"""

from cinder_forcedetach.conformance import initiator

Outcome = initiator.Outcome
BLOCK = 4096
#: The control pattern; a cut-off check writes another.
CONTROL = 0x3c


def backing_reader(backing):
    """A ``read(offset, length) -> bytes`` of *backing* (path or callable)."""
    if callable(backing):
        return backing

    def read(offset, length):
        with open(backing, 'rb') as f:
            f.seek(offset)
            return f.read(length)
    return read


def control_write(testcase, session, pattern=CONTROL, offset=0,
                  length=BLOCK, backing=None, timeout=10):
    """A write that must succeed on *session*; returns its Outcome.

    Done right before the teardown.  With *backing*, its bytes must be
    there at once (qemu-io over libiscsi has no cache of its own).
    """
    control = session.try_write(pattern, offset, length, timeout=timeout)
    testcase.assertEqual(Outcome.WROTE, control.kind,
                         'control write before the teardown: %s' % control)
    if backing is not None:
        testcase.assertEqual(bytes([pattern]) * length,
                             backing_reader(backing)(offset, length),
                             'the control write is not on the backing store')
    control.session = session
    control.late = len(getattr(session, 'late', ()))
    session.control = control
    return control


def assert_refused(testcase, outcome, what='the cut-off initiator'):
    """*outcome* is a positive refusal, else fail with its output."""
    testcase.assertIsInstance(outcome, Outcome)
    if not outcome.refused:
        testcase.fail('%s got no positive refusal: %s' % (what, outcome))
    return outcome


def assert_cut_off(testcase, session, backing, pattern, offset=None,
                   control=None, length=BLOCK, timeout=3, read=False,
                   what='the cut-off initiator', refusal_wait=35,
                   control_landed=True):
    """*session* is cut off: a positive refusal, and nothing landed.

    *control*: the :func:`control_write` outcome of this *session* before
    the teardown (required).  *backing*: the backing file's path, or a
    ``read(offset, length)`` callable.  *pattern* is written at *offset*
    (default: the control write's offset, so that the control's bytes
    must still be there); with *read*, a read of the control pattern is
    tried too and must be refused.  No answer in *timeout* seconds waits
    up to *refusal_wait* more for libiscsi to log a refused re-login (its
    backoff grows with each try): a hung initiator fails only then.
    *control_landed*: False where the teardown itself rewrites the
    volume (a rebuild's reimage): the control's bytes are then not
    checked, only the pattern's absence.  Returns the write's Outcome.
    """
    testcase.assertIsNotNone(control, 'no control write before the '
                             'teardown: a cut-off cannot be told from a '
                             'hung initiator')
    testcase.assertEqual(Outcome.WROTE, control.kind,
                         'control write before the teardown: %s' % control)
    testcase.assertIs(session, getattr(control, 'session', None),
                      'the control write was not on this session')
    testcase.assertNotEqual(control.pattern, pattern,
                            'the cut-off pattern must differ from the '
                            'control\'s')
    if offset is None:
        offset = control.offset
    outcome = session.try_write(pattern, offset, length, timeout=timeout,
                                refusal_wait=refusal_wait)
    assert_refused(testcase, outcome, what)
    if read:
        assert_refused(testcase, session.try_read(
            control.pattern, control.offset, control.length,
            timeout=timeout, refusal_wait=refusal_wait), what + ' (read)')
    # A command that timed out earlier and was acknowledged later is a
    # write the target took after all.
    late = [text for text in getattr(session, 'late', ())[
        getattr(control, 'late', 0):] if 'wrote ' in text]
    testcase.assertEqual([], late, '%s had a write acknowledged late' %
                         what)
    reader = backing_reader(backing)
    data = reader(offset, length)
    testcase.assertEqual(length, len(data or b''),
                         'the backing store could not be read at %d' %
                         offset)
    landed = data.count(bytes([pattern]))
    testcase.assertEqual(0, landed, '%d byte(s) of %s\'s pattern 0x%02x '
                         'reached the backing store at offset %d (%s)' % (
                             landed, what, pattern, offset, outcome))
    if control_landed and control.offset < offset + length and offset < (
            control.offset + control.length):
        testcase.assertEqual(
            bytes([control.pattern]) * control.length,
            reader(control.offset, control.length),
            'the control write is not on the backing store: wrong backing '
            'reader, or the volume changed under the test')
    return outcome
