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

"""A Jepsen-style history of a run, and the checker that reads it.

A run (``tools/soak.py --history``) records, on one monotonic clock:

* every **operation** with its start and end and outcome (``ok``,
  ``fail``: refused, nothing changed as far as the client knows;
  ``info``: unknown, e.g. its service was killed): ``attach`` of a host,
  ``delete_attachment``, ``force_detach``, ``reset_status`` (the operator's
  status-only reset, Horizon's "Update Volume Status");
* every **fault** (``kill -9`` of a volume service at a fault point, or
  of the etcd leader) with its start and end;
* every **write** a host's initiator issues: the volume, the slot it
  writes (each write its own 4 KiB block, never written twice), start,
  end and outcome;
* every **observation** of Cinder and the backend: a volume's status, the
  hosts with a live attachment, the target's ACL, and whether an
  operation on the volume was in flight (then nothing is judged).

After the run, :func:`check` reads the history and what landed on each
volume (which host's pattern each written slot holds) and returns the
violations:

``late_write``
    a write that landed although it started after its host's access to
    the volume had ended (Cinder showed no live attachment of the host,
    or on a volume that is not multiattach another host was granted, our
    grant fence cutting every other holder), with no attach of that host
    in flight or done between that end and the write's end.  The same
    host granted again may land: a cut initiator resumes writing if
    access ever comes back, and the access is then its own.
``second_writer``
    the late write of a host cut by another host's grant (a volume that is
    not multiattach): two hosts writing it at once.
``available_exported``
    Cinder said ``available`` while the target still existed, with no
    operation of the volume in flight, unless the operator's status-only
    reset said so and none of our operations has run on it since.
``attachment_lost``
    an attachment the run created (its attach ``ok``) that Cinder no
    longer lists at the end, although no operation that could have ended
    it ran after its creation.
``attachment_unknown``
    a live attachment at the end that the run never created.

Conservative by construction: a write is judged only by what is sure (it
started after the host was known cut, and no re-grant overlaps), so a
violation is one.
"""

import collections
import contextlib
import json
import threading
import time

Violation = collections.namedtuple('Violation', 'kind volume detail')

#: Operations that may end attachments of their volume.
ENDING = ('delete_attachment', 'force_detach')


class History(object):
    """The events of one run; thread-safe."""

    def __init__(self):
        self.events = []
        self._lock = threading.Lock()

    @staticmethod
    def now():
        return time.monotonic()

    def add(self, **event):
        with self._lock:
            self.events.append(event)
        return event

    @contextlib.contextmanager
    def op(self, kind, volume, **fields):
        """Record an operation around a ``with`` block.

        The block may set ``event['outcome']`` (``fail`` for a refusal it
        handled, or fields such as ``attachment``); an exception leaves
        ``info`` (unknown) unless the block set an outcome first, and its
        text as ``error``: what a failed run's reader needs first.
        """
        event = dict(fields, type='op', kind=kind, volume=volume,
                     start=self.now(), end=None, outcome=None)
        try:
            yield event
        except BaseException as exc:
            event['outcome'] = event['outcome'] or 'info'
            event['error'] = ('%s: %s' % (type(exc).__name__, exc))[:300]
            raise
        else:
            event['outcome'] = event['outcome'] or 'ok'
        finally:
            event['end'] = self.now()
            self.add(**event)

    def write(self, host, volume, slot, start, end, outcome):
        self.add(type='write', host=host, volume=volume, slot=slot,
                 start=start, end=end, outcome=outcome)

    def observe(self, volume, time_, status, hosts, target, acls, settled):
        """Cinder's and the backend's view of *volume*, read by *time_*.

        *hosts*: hosts with a live attachment; *target*: whether the
        volume's target exists, *acls* its initiators; *settled*: no
        operation of the volume was in flight while they were read.
        """
        self.add(type='observe', volume=volume, time=time_, status=status,
                 hosts=sorted(hosts), target=target, acls=sorted(acls),
                 settled=settled)

    def fault(self, kind, start, end, **fields):
        self.add(type='fault', kind=kind, start=start, end=end, **fields)

    def dump(self, path):
        with self._lock:
            events = list(self.events)
        with open(path, 'w') as f:
            for event in events:
                f.write(json.dumps(event, sort_keys=True) + '\n')


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _cuts(events, multiattach):
    """``{(host, volume): [(time, by, since)]}``: when access had ended.

    *by* is None (Cinder listed no live attachment of the host at *time*),
    or the host whose grant cut it (a volume that is not multiattach):
    that grant happened between *since*, its attach's start, and *time*,
    its end.
    """
    cuts = collections.defaultdict(list)
    hosts = {e['host'] for e in events if e.get('host')}
    for e in events:
        if e['type'] == 'observe':
            for host in hosts - set(e['hosts']):
                cuts[(host, e['volume'])].append(
                    (e['time'], None, e['time']))
        elif (e['type'] == 'op' and e['kind'] == 'attach' and
              e['outcome'] == 'ok' and not multiattach.get(e['volume'])):
            for host in hosts - {e['host']}:
                cuts[(host, e['volume'])].append(
                    (e['end'], e['host'], e['start']))
    return cuts


def _grants(events):
    """``{(host, volume): [(start, end)]}`` of every attach, any outcome."""
    grants = collections.defaultdict(list)
    for e in events:
        if e['type'] == 'op' and e['kind'] == 'attach':
            end = e['end'] if e['outcome'] in ('ok', 'fail') else float('inf')
            grants[(e['host'], e['volume'])].append((e['start'], end))
    return grants


def late_writes(events, landed, multiattach):
    """Violations of writes that landed after their host was cut."""
    cuts, grants = _cuts(events, multiattach), _grants(events)
    found = []
    for w in events:
        if w['type'] != 'write':
            continue
        if landed.get(w['volume'], {}).get(w['slot']) != w['host']:
            continue
        key = (w['host'], w['volume'])
        for cut, by, since in sorted(cuts.get(key, ())):
            if cut >= w['start']:
                break
            # Granted again since (its own access), or granted while the
            # other host's attach was in flight: which grant came last,
            # and cut the other, is not known.
            if any(start < w['end'] and end > since
                   for start, end in grants.get(key, ())):
                continue
            found.append(Violation(
                'second_writer' if by else 'late_write', w['volume'],
                'host %s: slot %d written at %.3f-%.3f landed; %s at %.3f' % (
                    w['host'], w['slot'], w['start'], w['end'],
                    'host %s was granted' % by if by else
                    'Cinder listed no live attachment of it', cut)))
            break
    return found


def left_by_a_reset(events, volume, time_):
    """Whether the operator's status-only reset made *volume* available.

    A reset ended before *time_*, and none of our operations on the volume
    (attach, attachment delete, force-detach) ran to its end since: Cinder
    says available because the operator said so, and the export is the
    holder's until our next grant (its fence) or detach.
    """
    resets = [e['end'] for e in events if e['type'] == 'op' and
              e['kind'] == 'reset_status' and e['volume'] == volume and
              e['outcome'] == 'ok' and e['end'] < time_]
    if not resets:
        return False
    return not any(e['type'] == 'op' and e['volume'] == volume and
                   e['kind'] != 'reset_status' and e['outcome'] == 'ok' and
                   max(resets) < e['start'] and e['end'] < time_
                   for e in events)


def exported_while_available(events):
    return [Violation('available_exported', e['volume'],
                      'at %.3f, ACL %s' % (e['time'], e['acls']))
            for e in events if e['type'] == 'observe' and e['settled'] and
            e['status'] == 'available' and e.get('target') and
            not left_by_a_reset(events, e['volume'], e['time'])]


def attachments(events, final):
    """Attachments lost or unknown; *final*: ``{volume: [live ids]}``."""
    created = {}
    for e in events:
        if (e['type'] == 'op' and e['kind'] == 'attach' and
                e.get('attachment')):
            created[e['attachment']] = e
    found = []
    for att_id, e in created.items():
        if e['outcome'] != 'ok' or att_id in final.get(e['volume'], ()):
            continue
        ended = any(
            o['type'] == 'op' and o['kind'] in ENDING and
            o['volume'] == e['volume'] and
            o.get('attachment') in (None, att_id) and
            o['end'] > e['start'] for o in events)
        if not ended:
            found.append(Violation('attachment_lost', e['volume'],
                                   'attachment %s of host %s' % (
                                       att_id, e['host'])))
    for volume, ids in final.items():
        for att_id in ids:
            if att_id not in created:
                found.append(Violation('attachment_unknown', volume,
                                       'attachment %s' % att_id))
    return found


def check(events, landed, multiattach, final):
    """Every violation of the history.

    :param landed: ``{volume: {slot: host}}``, what the volumes hold.
    :param multiattach: ``{volume: bool}``.
    :param final: ``{volume: [ids of its live attachments at the end]}``.
    """
    return (late_writes(events, landed, multiattach) +
            exported_while_available(events) +
            attachments(events, final))
