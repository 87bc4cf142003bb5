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

"""The one reader of ``<id> | <kind> | <reason>`` lists.

``tests/upstream/differences.txt`` (upstream tests that fail here on
purpose) and ``tools/tempest-skips.txt`` (tempest tests skipped here) are
both lists of ids, each with what is expected of it and why.  Every entry
must say why: a line without its three fields, with an empty reason or an
id listed twice is an error that names the file and the line.
"""


def read_id_lines(lines, path, form):
    """``(where, id, kind, reason)`` of each entry of *lines*.

    Blank lines and ``#`` comments are skipped.  *form* is the line's
    form for the error message, e.g. ``"<id> | tgt|rbd|both | <reason>"``;
    *where* (``path:line``) is for the caller's own errors about *kind*.
    """
    seen = set()
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith('#'):
            continue
        where = '%s:%d' % (path, number)
        fields = [field.strip() for field in line.split('|', 2)]
        if len(fields) != 3 or not all(fields):
            raise ValueError('%s: expected "%s": %s' % (where, form, line))
        test_id, kind, reason = fields
        if test_id in seen:
            raise ValueError('%s: %s is listed twice' % (where, test_id))
        seen.add(test_id)
        yield where, test_id, kind, reason
