/*
 * agentlog._speedups: an optional C accelerator for the lossless-JSON gate.
 *
 * Why it exists: a session holds hundreds of thousands of small frozen containers. Built from
 * Python, every one of them is a GC-tracked dict/list subclass, and CPython's full collections then
 * spend more time traversing the log than the appends themselves take. Frozen JSON containers can
 * never be part of a reference cycle (they only hold scalars and frozen containers completed before
 * them), so they need no cycle collection at all: built here, they are created already populated and
 * then untracked.
 *
 * Contract: snapshot(v) either returns a detached frozen copy of v that the pure-Python walk in
 * jsonvalue.py would also return, or returns the configured GIVE_UP sentinel. It gives up at the first
 * value it does not handle (anything invalid or unusual, or nesting deeper than MAX_DEPTH); the Python
 * walk then redoes the whole value and produces the exact result or error. So this file never decides
 * what is valid JSON on its own: it only accepts the plainly valid subset, faster.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <time.h>

#define MAX_DEPTH 48
/* Bump with any change to a function's signature or behaviour; agentlog/_accel.py expects this value. */
#define SPEEDUPS_VERSION 5
#define MAX_SAFE 9007199254740991LL

static PyTypeObject *frozen_dict_type = NULL;
static PyTypeObject *frozen_list_type = NULL;
static PyObject *dict_types = NULL; /* tuple of accepted dict types */
static PyObject *list_types = NULL; /* tuple of accepted list types */
static PyObject *give_up = NULL;    /* sentinel returned when the Python walk must decide */
static PyObject *empty_tuple = NULL;
/* Interned wire keys, created at module init. */
static PyObject *k_type, *k_seq, *k_time, *k_data, *k_surface_op, *k_sources, *k_ignorable;
static PyObject *k_turn, *k_step, *k_chunk, *k_index, *k_text, *k_id, *k_name, *k_arguments_delta, *v_chunk_type;

static int
type_in(PyTypeObject *t, PyObject *types)
{
    if (types == NULL) {
        return 0;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(types);
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((PyObject *)t == PyTuple_GET_ITEM(types, i)) {
            return 1;
        }
    }
    return 0;
}

/* 1 when the str has no lone surrogate (so it is encodable as UTF-8), else 0. */
static int
str_ok(PyObject *s)
{
    if (PyUnicode_IS_ASCII(s)) {
        return 1;
    }
    int kind = PyUnicode_KIND(s);
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (kind == PyUnicode_1BYTE_KIND) {
        return 1;
    }
    if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *p = PyUnicode_2BYTE_DATA(s);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (p[i] >= 0xD800 && p[i] <= 0xDFFF) {
                return 0;
            }
        }
        return 1;
    }
    const Py_UCS4 *q = PyUnicode_4BYTE_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (q[i] >= 0xD800 && q[i] <= 0xDFFF) {
            return 0;
        }
    }
    return 1;
}

/* New reference to the frozen copy; NULL with no error set = give up; NULL with error = failure. */
static PyObject *snap(PyObject *v, int depth);

static PyObject *
snap_dict(PyObject *src, int depth)
{
    PyObject *out = PyDict_Type.tp_new(frozen_dict_type, empty_tuple, NULL);
    if (out == NULL) {
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(src, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key) || !str_ok(key)) {
            Py_DECREF(out);
            return NULL;
        }
        PyObject *child = snap(value, depth + 1);
        if (child == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        int rc = PyDict_SetItem(out, key, child);
        Py_DECREF(child);
        if (rc < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    PyObject_GC_UnTrack(out);
    return out;
}

static PyObject *
snap_list(PyObject *src, int depth)
{
    PyObject *out = PyType_GenericNew(frozen_list_type, empty_tuple, NULL);
    if (out == NULL) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(src);
    for (Py_ssize_t i = 0; i < n; i++) {
        /* No Python code runs during the walk, so the source cannot change size under us; re-check anyway. */
        if (i >= PyList_GET_SIZE(src)) {
            break;
        }
        PyObject *child = snap(PyList_GET_ITEM(src, i), depth + 1);
        if (child == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        int rc = PyList_Append(out, child);
        Py_DECREF(child);
        if (rc < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    PyObject_GC_UnTrack(out);
    return out;
}

static PyObject *
snap(PyObject *v, int depth)
{
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyUnicode_Type) {
        if (!str_ok(v)) {
            return NULL;
        }
        Py_INCREF(v);
        return v;
    }
    if (t == &PyLong_Type) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow != 0 || x > MAX_SAFE || x < -MAX_SAFE) {
            return NULL;
        }
        if (x == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return NULL;
        }
        Py_INCREF(v);
        return v;
    }
    if (v == Py_None || t == &PyBool_Type) {
        Py_INCREF(v);
        return v;
    }
    if (t == &PyFloat_Type) {
        double d = PyFloat_AS_DOUBLE(v);
        if (!isfinite(d) || (d == 0.0 && signbit(d))) {
            return NULL;
        }
        Py_INCREF(v);
        return v;
    }
    if (depth >= MAX_DEPTH) {
        return NULL;
    }
    if (t == &PyDict_Type || type_in(t, dict_types)) {
        return snap_dict(v, depth);
    }
    if (t == &PyList_Type || type_in(t, list_types)) {
        return snap_list(v, depth);
    }
    return NULL;
}

static PyObject *
snapshot(PyObject *module, PyObject *value)
{
    if (frozen_dict_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "agentlog._speedups is not configured");
        return NULL;
    }
    PyObject *result = snap(value, 0);
    if (result == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_INCREF(give_up);
        return give_up;
    }
    return result;
}

/* freeze_owned(v): freeze an exclusively owned, freshly parsed graph IN PLACE, without allocating.
 *
 * The restore path's contract is that the caller hands over graphs nobody else references (they come
 * straight from a JSON parser). Instead of copying every container, each plain dict/list is turned
 * into its frozen subclass by switching its type: FrozenDict/FrozenList add no instance fields, so the
 * memory layout is the dict's/list's own. The type's reference count is taken for each instance, as
 * heap-type instances require. Returns 0 done, 1 give up (too deep; the Python path takes over and
 * treats already-frozen children as done), -1 error. A container is untracked only when all of its
 * children are untracked. */
static int
freeze_owned(PyObject *v, int depth, int *untracked)
{
    PyTypeObject *t = Py_TYPE(v);
    if (t != &PyDict_Type && t != &PyList_Type) {
        if (PyObject_IS_GC(v) && PyObject_GC_IsTracked(v)) {
            *untracked = 0;
        }
        return 0;
    }
    if (depth >= MAX_DEPTH) {
        return 1;
    }
    int all_untracked = 1;
    if (t == &PyDict_Type) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(v, &pos, &key, &value)) {
            int rc = freeze_owned(value, depth + 1, &all_untracked);
            if (rc != 0) {
                return rc;
            }
        }
        Py_INCREF(frozen_dict_type);
        Py_SET_TYPE(v, frozen_dict_type);
    }
    else {
        Py_ssize_t n = PyList_GET_SIZE(v);
        for (Py_ssize_t i = 0; i < n; i++) {
            int rc = freeze_owned(PyList_GET_ITEM(v, i), depth + 1, &all_untracked);
            if (rc != 0) {
                return rc;
            }
        }
        Py_INCREF(frozen_list_type);
        Py_SET_TYPE(v, frozen_list_type);
    }
    if (all_untracked) {
        PyObject_GC_UnTrack(v);
    }
    else {
        *untracked = 0;
    }
    return 0;
}

static PyObject *
freeze_owned_tree(PyObject *module, PyObject *value)
{
    if (frozen_dict_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "agentlog._speedups is not configured");
        return NULL;
    }
    int untracked = 1;
    int rc = freeze_owned(value, 0, &untracked);
    if (rc < 0) {
        return NULL;
    }
    if (rc > 0) {
        Py_INCREF(give_up);
        return give_up;
    }
    Py_INCREF(value);
    return value;
}


/* expand_row(tool, chunk_type, seq0, time0, turn, step, index, dt, payload, call_id, name, event_cls)
 *
 * Expand one packed chunk row (already validated by chunkrows.decode_storage_record, checks 1-10)
 * into frozen, untracked events of class event_cls, building each member's event, data and chunk
 * directly in their final frozen form. Returns None when a member time leaves the safe-integer range
 * (check 11): the Python expansion then raises the exact error. `name` is None when the row has none.
 * With event_cls None nothing is built: the checks run and the last member's time is returned (or None).
 */

static PyObject *
frozen_dict_new(PyTypeObject *cls)
{
    return PyDict_Type.tp_new(cls, empty_tuple, NULL);
}

static PyObject *
expand_row(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 12 || !PyList_Check(args[7]) || !PyList_Check(args[8]) ||
        !(PyType_Check(args[11]) || args[11] == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "expand_row: bad arguments");
        return NULL;
    }
    int tool = PyObject_IsTrue(args[0]);
    PyObject *chunk_type = args[1];
    long long seq0 = PyLong_AsLongLong(args[2]);
    long long time = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    PyObject *turn = args[4], *step = args[5], *index = args[6], *dt = args[7], *payload = args[8];
    PyObject *call_id = args[9], *name = args[10];
    Py_ssize_t n = PyList_GET_SIZE(payload);
    /* Checks 7-10 of the row codec: decline (None) on any failure so the Python path reports it. */
    if (n == 0 || PyList_GET_SIZE(dt) != n - 1 || seq0 < 0 || seq0 + (long long)n - 1 > MAX_SAFE) {
        Py_RETURN_NONE;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (!PyUnicode_CheckExact(PyList_GET_ITEM(payload, k))) {
            Py_RETURN_NONE;
        }
    }
    for (Py_ssize_t k = 0; k < n - 1; k++) {
        PyObject *gap = PyList_GET_ITEM(dt, k);
        int overflow = 0;
        long long g = PyLong_CheckExact(gap) ? PyLong_AsLongLongAndOverflow(gap, &overflow) : 0;
        if (!PyLong_CheckExact(gap) || overflow || g > MAX_SAFE || g < -MAX_SAFE) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    if (args[11] == Py_None) {
        /* Check only (a compact load keeps the row packed): check 11 over the member times, then the
         * last member's time, or None so the Python checks report the failure. */
        for (Py_ssize_t k = 0; k < n - 1; k++) {
            time += PyLong_AsLongLong(PyList_GET_ITEM(dt, k));
            if (time > MAX_SAFE || time < -MAX_SAFE) {
                Py_RETURN_NONE;
            }
        }
        return PyLong_FromLongLong(time);
    }
    PyTypeObject *event_cls = (PyTypeObject *)args[11];
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (k > 0) {
            int overflow = 0;
            long long gap = PyLong_AsLongLongAndOverflow(PyList_GET_ITEM(dt, k - 1), &overflow);
            if (overflow || (gap == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                Py_DECREF(out);
                Py_RETURN_NONE;
            }
            time += gap;
            if (time > MAX_SAFE || time < -MAX_SAFE) {
                Py_DECREF(out);
                Py_RETURN_NONE;
            }
        }
        PyObject *chunk = frozen_dict_new(frozen_dict_type);
        PyObject *data = frozen_dict_new(frozen_dict_type);
        PyObject *event = frozen_dict_new(event_cls);
        PyObject *seq_obj = PyLong_FromLongLong(seq0 + k);
        PyObject *time_obj = PyLong_FromLongLong(time);
        PyObject *member = PyList_GET_ITEM(payload, k);
        int rc = (chunk && data && event && seq_obj && time_obj) ? 0 : -1;
        if (rc == 0) {
            rc = PyDict_SetItem(chunk, k_type, chunk_type);
        }
        if (rc == 0) {
            rc = PyDict_SetItem(chunk, k_index, index);
        }
        if (rc == 0 && tool) {
            rc = PyDict_SetItem(chunk, k_id, call_id);
            if (rc == 0 && name != Py_None) {
                rc = PyDict_SetItem(chunk, k_name, name);
            }
            if (rc == 0) {
                rc = PyDict_SetItem(chunk, k_arguments_delta, member);
            }
        }
        else if (rc == 0) {
            rc = PyDict_SetItem(chunk, k_text, member);
        }
        if (rc == 0) {
            rc = PyDict_SetItem(data, k_turn, turn);
        }
        if (rc == 0) {
            rc = PyDict_SetItem(data, k_step, step);
        }
        if (rc == 0) {
            rc = PyDict_SetItem(data, k_chunk, chunk);
        }
        if (rc == 0) {
            rc = PyDict_SetItem(event, k_type, v_chunk_type);
        }
        if (rc == 0) {
            rc = PyDict_SetItem(event, k_seq, seq_obj);
        }
        if (rc == 0) {
            rc = PyDict_SetItem(event, k_time, time_obj);
        }
        if (rc == 0) {
            rc = PyDict_SetItem(event, k_data, data);
        }
        Py_XDECREF(chunk);
        Py_XDECREF(data);
        Py_XDECREF(seq_obj);
        Py_XDECREF(time_obj);
        if (rc < 0) {
            Py_XDECREF(event);
            Py_DECREF(out);
            return NULL;
        }
        PyObject_GC_UnTrack(chunk);
        PyObject_GC_UnTrack(data);
        PyObject_GC_UnTrack(event);
        PyList_SET_ITEM(out, k, event);
    }
    return out;
}

/* check_row(value, absent) -> ((tool, chunk_type, seq0, time0, turn, step, index, dt, payload, id, name),
 *                              last_time) or None
 *
 * All eleven checks of a packed chunk row (spec section 15.3) on a freshly parsed row dict, without
 * expanding it: what a compact load keeps instead of the members. `name` is `absent` when the row has
 * none. On anything it does not plainly accept (any failure, a subclass, an unusual type) it returns
 * None and chunkrows' Python checks decide, with the exact error; it never refuses on its own. */

static PyObject *k_seq0, *k_time0, *k_dt, *k_texts, *k_args;
static PyObject *v_text_row, *v_reasoning_row, *v_tool_row, *v_text_delta, *v_reasoning_delta, *v_tool_delta;

static int
is_number(PyObject *v)
{
    return v != NULL && (PyLong_CheckExact(v) || PyFloat_CheckExact(v));
}

static PyObject *
check_row(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "check_row(value, absent) expected");
        return NULL;
    }
    PyObject *value = args[0], *absent = args[1];
    if (!PyDict_CheckExact(value) || PyDict_GET_SIZE(value) != 4) {
        Py_RETURN_NONE;
    }
    PyObject *tag = PyDict_GetItem(value, k_type);
    if (tag == NULL || !PyUnicode_CheckExact(tag)) {
        Py_RETURN_NONE;
    }
    int tool;
    PyObject *chunk_type;
    if (PyUnicode_Compare(tag, v_tool_row) == 0) {
        tool = 1;
        chunk_type = v_tool_delta;
    }
    else if (PyUnicode_Compare(tag, v_text_row) == 0) {
        tool = 0;
        chunk_type = v_text_delta;
    }
    else if (PyUnicode_Compare(tag, v_reasoning_row) == 0) {
        tool = 0;
        chunk_type = v_reasoning_delta;
    }
    else {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *seq0 = PyDict_GetItem(value, k_seq0), *time0 = PyDict_GetItem(value, k_time0);
    PyObject *data = PyDict_GetItem(value, k_data);
    if (seq0 == NULL || time0 == NULL || data == NULL || !PyLong_CheckExact(seq0) || !PyLong_CheckExact(time0) ||
        !PyDict_CheckExact(data)) {
        Py_RETURN_NONE;
    }
    int overflow = 0;
    long long seq = PyLong_AsLongLongAndOverflow(seq0, &overflow);
    if (overflow || seq < 0 || seq > MAX_SAFE) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    long long time = PyLong_AsLongLongAndOverflow(time0, &overflow);
    if (overflow || time < -MAX_SAFE || time > MAX_SAFE) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t size = PyDict_GET_SIZE(data);
    PyObject *turn = PyDict_GetItem(data, k_turn), *step = PyDict_GetItem(data, k_step);
    PyObject *index = PyDict_GetItem(data, k_index), *dt = PyDict_GetItem(data, k_dt);
    PyObject *payload, *call_id = Py_None, *name = absent;
    if (tool) {
        payload = PyDict_GetItem(data, k_args);
        call_id = PyDict_GetItem(data, k_id);
        PyObject *given = PyDict_GetItem(data, k_name);
        if (call_id == NULL || !PyUnicode_CheckExact(call_id) ||
            (!(size == 6 && given == NULL) && !(size == 7 && given != NULL && PyUnicode_CheckExact(given)))) {
            Py_RETURN_NONE;
        }
        if (given != NULL) {
            name = given;
        }
    }
    else {
        payload = PyDict_GetItem(data, k_texts);
        if (size != 5) {
            Py_RETURN_NONE;
        }
    }
    if (!is_number(turn) || !is_number(step) || !is_number(index) || payload == NULL || dt == NULL ||
        !PyList_CheckExact(payload) || !PyList_CheckExact(dt)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t n = PyList_GET_SIZE(payload);
    if (n == 0 || PyList_GET_SIZE(dt) != n - 1 || seq + (long long)n - 1 > MAX_SAFE) {
        Py_RETURN_NONE;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (!PyUnicode_CheckExact(PyList_GET_ITEM(payload, k))) {
            Py_RETURN_NONE;
        }
    }
    for (Py_ssize_t k = 0; k < n - 1; k++) {
        PyObject *gap = PyList_GET_ITEM(dt, k);
        if (!PyLong_CheckExact(gap)) {
            Py_RETURN_NONE;
        }
        long long g = PyLong_AsLongLongAndOverflow(gap, &overflow);
        if (overflow || g > MAX_SAFE || g < -MAX_SAFE) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        time += g;
        if (time > MAX_SAFE || time < -MAX_SAFE) {
            Py_RETURN_NONE;
        }
    }
    PyObject *facts = PyTuple_Pack(11, tool ? Py_True : Py_False, chunk_type, seq0, time0, turn, step, index, dt,
                                   payload, call_id, name);
    if (facts == NULL) {
        return NULL;
    }
    /* The row's lists hold only str/int and are never changed again (the run owns them), and the facts
     * refer to nothing that can lead back to them: none of it can be part of a cycle, so the collector
     * need not track it (a compact log holds four containers per run otherwise, all traversed by the
     * first collection after a load). */
    PyObject_GC_UnTrack(payload);
    PyObject_GC_UnTrack(dt);
    PyObject_GC_UnTrack(facts);
    return Py_BuildValue("(NL)", facts, time);
}

/* untrack(obj): stop the cycle collector from tracking obj (a packed run: it refers only to untracked
 * data and to the list of its members' frozen events, never back to anything that refers to it). */
static PyObject *
untrack(PyObject *module, PyObject *obj)
{
    if (PyObject_IS_GC(obj) && PyObject_GC_IsTracked(obj)) {
        PyObject_GC_UnTrack(obj);
    }
    Py_INCREF(obj);
    return obj;
}

/* seal(cls, mapping): a new, untracked instance of the dict subclass cls holding mapping's items.
 * Only for mappings whose values are already frozen JSON (the event envelope). */
static PyObject *
seal(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "seal(cls, dict) expected");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    if (!PyType_IsSubtype(cls, &PyDict_Type)) {
        PyErr_SetString(PyExc_TypeError, "seal: cls must be a dict subclass");
        return NULL;
    }
    PyObject *out = PyDict_Type.tp_new(cls, empty_tuple, NULL);
    if (out == NULL) {
        return NULL;
    }
    if (PyDict_Update(out, args[1]) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    PyObject_GC_UnTrack(out);
    return out;
}

static PyObject *
configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyTuple_Check(args[2]) ||
        !PyTuple_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "configure(frozen_dict, frozen_list, dict_types, list_types, give_up)");
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_INCREF(args[1]);
    Py_INCREF(args[2]);
    Py_INCREF(args[3]);
    Py_INCREF(args[4]);
    Py_XSETREF(frozen_dict_type, (PyTypeObject *)args[0]);
    Py_XSETREF(frozen_list_type, (PyTypeObject *)args[1]);
    Py_XSETREF(dict_types, args[2]);
    Py_XSETREF(list_types, args[3]);
    Py_XSETREF(give_up, args[4]);
    Py_RETURN_NONE;
}


/* restore_events(entries, special_types, event_cls[, rules[, base[, checks]]]) -> (events, specials, stop[, verified])
 *
 * The restore path's per-event work for the common case, in one pass: for entry i (a plain dict from
 * a JSON parser) check the envelope (keys within the seven envelope keys, `type` a str, `seq == i`,
 * `time` a safe integer, `data` present, `ignorable` absent or true), freeze `data`, `surfaceOp` and
 * `sourceEventSeqs`, and seal an untracked event of class event_cls with the entry's key order.
 * Entries that need Python-level checks (their type is in special_types, or they carry surface keys)
 * are still converted, and their indices are returned in `specials`. With `rules`, entries of the core
 * log-only types are checked against their data rule here (see checked_snapshot below). At the first entry this function
 * does not handle it stops: `stop` is that index (or len(entries)); the caller validates the rest with
 * the canonical Python path, which produces the exact error.
 */

static int
is_envelope_key(PyObject *key)
{
    return key == k_type || key == k_seq || key == k_time || key == k_data || key == k_surface_op ||
           key == k_sources || key == k_ignorable;
}

static int rule_holds(PyObject *d, long kind);

static int str_is(PyObject *v, const char *text);

/* 1 when the parsed entry (a surface type, at seq `seq`) plainly carries a surface append that
 * surface.plan_surface_event accepts: surfaceOp exactly the str "append" and sourceEventSeqs absent, or
 * a list of exact ints, strictly increasing (so without duplicates), from 0 and below `seq`, empty only
 * on an assistant/message. 0 means only "let the Python planner judge it". Never sets an error. */
static int
plain_append(PyObject *entry, PyObject *type, long long seq)
{
    PyObject *op = PyDict_GetItem(entry, k_surface_op);
    if (op == NULL || !str_is(op, "append")) {
        return 0;
    }
    PyObject *sources = PyDict_GetItem(entry, k_sources);
    if (sources == NULL) {
        return 1;
    }
    if (!PyList_Check(sources)) { /* (frozen in place by now: the frozen list type is a list subclass) */
        return 0;
    }
    Py_ssize_t n = PyList_GET_SIZE(sources);
    if (n == 0) {
        return str_is(type, "assistant/message");
    }
    long long previous = -1;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *v = PyList_GET_ITEM(sources, j);
        if (!PyLong_CheckExact(v)) {
            return 0;
        }
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || x <= previous || x >= seq) {
            PyErr_Clear();
            return 0;
        }
        previous = x;
    }
    return 1;
}

static PyObject *
restore_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 3 || nargs > 7 || !PyList_Check(args[0]) || !PyAnySet_Check(args[1]) || !PyType_Check(args[2]) ||
        (nargs >= 4 && !PyDict_Check(args[3])) || (nargs >= 5 && !PyLong_CheckExact(args[4])) ||
        (nargs >= 6 && !PyDict_Check(args[5]))) {
        PyErr_SetString(PyExc_TypeError,
                        "restore_events(list, frozenset, type[, rules[, base[, checks[, appends]]]]) expected");
        return NULL;
    }
    /* appends (optional, with checks): when true, a verified entry (its message rule holds) whose surface
     * metadata is plainly an append -- surfaceOp the str "append", sourceEventSeqs absent or a list of
     * strictly increasing safe integers from 0 below its seq, non-empty unless an assistant/message -- is
     * not reported as special but in a fifth list, `appended`: the caller commits it as a surface append
     * without planning it (it would plan exactly that). The caller passes true only when no plugin
     * validator applies to the message types. Anything else stays special, for the Python checks. */
    int appends = nargs == 7 ? PyObject_IsTrue(args[6]) : 0;
    if (appends < 0) {
        return NULL;
    }
    /* checks (optional): {type: kind} of data rules to try on *special* entries (the message types).
     * The indices of special entries whose data plainly satisfies its rule are returned as a fourth
     * list, `verified`: the caller may skip its own check of that rule (never any other check). */
    PyObject *checks = nargs >= 6 ? args[5] : NULL;
    /* base (optional): the seq of entries[0], for a segment of a log (a compact restored log restores the
     * plain events between its packed chunk runs segment by segment). */
    long long base = 0;
    if (nargs >= 5) {
        base = PyLong_AsLongLong(args[4]);
        if (base == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    /* rules (optional): {type: kind} of the data rules checked_snapshot() applies. An entry of such a
     * type whose data plainly satisfies its rule needs no Python check; one that does not stops the
     * fast path there, so the Python path reports the exact error. */
    PyObject *rules = nargs >= 4 ? args[3] : NULL;
    if (frozen_dict_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "agentlog._speedups is not configured");
        return NULL;
    }
    PyObject *entries = args[0], *special_types = args[1];
    PyTypeObject *event_cls = (PyTypeObject *)args[2];
    Py_ssize_t n = PyList_GET_SIZE(entries);
    PyObject *events = PyList_New(0);
    PyObject *specials = PyList_New(0);
    PyObject *verified = PyList_New(0);
    PyObject *appended = PyList_New(0);
    if (events == NULL || specials == NULL || verified == NULL || appended == NULL) {
        Py_XDECREF(events);
        Py_XDECREF(specials);
        Py_XDECREF(verified);
        Py_XDECREF(appended);
        return NULL;
    }
    Py_ssize_t i = 0;
    for (; i < n; i++) {
        PyObject *entry = PyList_GET_ITEM(entries, i);
        if (Py_TYPE(entry) == event_cls) {
            /* Already a sealed event (expanded from a validated packed chunk row): a log-only chunk
             * without surface keys by construction; only its position needs checking. */
            PyObject *eseq = PyDict_GetItemWithError(entry, k_seq);
            if (eseq == NULL || !PyLong_CheckExact(eseq) || PyLong_AsLongLong(eseq) != base + (long long)i) {
                PyErr_Clear();
                break;
            }
            if (PyList_Append(events, entry) < 0) {
                goto error;
            }
            continue;
        }
        if (!PyDict_CheckExact(entry)) {
            break;
        }
        PyObject *type = PyDict_GetItemWithError(entry, k_type);
        PyObject *seq = PyDict_GetItemWithError(entry, k_seq);
        PyObject *time = PyDict_GetItemWithError(entry, k_time);
        PyObject *data = PyDict_GetItemWithError(entry, k_data);
        if (PyErr_Occurred()) {
            goto error;
        }
        if (type == NULL || !PyUnicode_CheckExact(type) || seq == NULL || !PyLong_CheckExact(seq) || time == NULL ||
            !PyLong_CheckExact(time) || data == NULL) {
            break;
        }
        int overflow = 0;
        long long seq_v = PyLong_AsLongLongAndOverflow(seq, &overflow);
        if (overflow || seq_v != base + (long long)i) {
            break;
        }
        long long time_v = PyLong_AsLongLongAndOverflow(time, &overflow);
        if (overflow || time_v > MAX_SAFE || time_v < -MAX_SAFE) {
            break;
        }
        int special = 0;
        int bad = 0;
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        /* Keys are interned by the parser only sometimes; compare by value when identity fails. */
        while (PyDict_Next(entry, &pos, &key, &value)) {
            if (!PyUnicode_CheckExact(key)) {
                bad = 1;
                break;
            }
            if (!is_envelope_key(key)) {
                if (PyUnicode_Compare(key, k_type) == 0 || PyUnicode_Compare(key, k_seq) == 0 ||
                    PyUnicode_Compare(key, k_time) == 0 || PyUnicode_Compare(key, k_data) == 0) {
                    continue;
                }
                if (PyUnicode_Compare(key, k_surface_op) == 0 || PyUnicode_Compare(key, k_sources) == 0) {
                    special = 1;
                    continue;
                }
                if (PyUnicode_Compare(key, k_ignorable) == 0) {
                    if (value != Py_True) {
                        bad = 1;
                        break;
                    }
                    continue;
                }
                bad = 1;
                break;
            }
            if (key == k_surface_op || key == k_sources) {
                special = 1;
            }
            else if (key == k_ignorable && value != Py_True) {
                bad = 1;
                break;
            }
        }
        if (bad) {
            break;
        }
        int contains = PySet_Contains(special_types, type);
        if (contains < 0) {
            goto error;
        }
        special |= contains;
        int checked = 0;
        if (checks != NULL && special) {
            PyObject *check = PyDict_GetItemWithError(checks, type);
            if (check == NULL && PyErr_Occurred()) {
                goto error;
            }
            checked = check != NULL && PyLong_CheckExact(check) && rule_holds(data, PyLong_AsLong(check));
            PyErr_Clear();
        }
        if (rules != NULL && !special) {
            PyObject *rule = PyDict_GetItemWithError(rules, type);
            if (rule == NULL && PyErr_Occurred()) {
                goto error;
            }
            if (rule != NULL && (!PyLong_CheckExact(rule) || !rule_holds(data, PyLong_AsLong(rule)))) {
                PyErr_Clear();
                break;
            }
        }
        PyObject *event = PyDict_Type.tp_new(event_cls, empty_tuple, NULL);
        if (event == NULL) {
            goto error;
        }
        pos = 0;
        int failed = 0;
        int untracked = 1;
        while (PyDict_Next(entry, &pos, &key, &value)) {
            int frc = freeze_owned(value, 0, &untracked);
            if (frc != 0) {
                failed = frc < 0 ? 1 : 2; /* 2: too deep for the fast path, Python handles this entry */
                break;
            }
            if (PyDict_SetItem(event, key, value) < 0) {
                failed = 1;
                break;
            }
        }
        if (failed) {
            Py_DECREF(event);
            if (failed == 1) {
                goto error;
            }
            break;
        }
        if (untracked) {
            PyObject_GC_UnTrack(event);
        }
        int rc = PyList_Append(events, event);
        Py_DECREF(event);
        if (rc < 0) {
            goto error;
        }
        if (special) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL) {
                goto error;
            }
            int rc2;
            if (checked && appends && plain_append(entry, type, seq_v)) {
                rc2 = PyList_Append(appended, index);
            }
            else {
                rc2 = PyList_Append(specials, index);
                if (rc2 == 0 && checked) {
                    rc2 = PyList_Append(verified, index);
                }
            }
            Py_DECREF(index);
            if (rc2 < 0) {
                goto error;
            }
        }
    }
    if (nargs == 7) {
        return Py_BuildValue("(NNnNN)", events, specials, i, verified, appended);
    }
    Py_DECREF(appended);
    if (checks != NULL) {
        return Py_BuildValue("(NNnN)", events, specials, i, verified);
    }
    Py_DECREF(verified);
    return Py_BuildValue("(NNn)", events, specials, i);
error:
    Py_DECREF(events);
    Py_DECREF(specials);
    Py_DECREF(verified);
    Py_DECREF(appended);
    return NULL;
}

/* --- the append hot path ----------------------------------------------------------------------
 *
 * checked_snapshot(value, kind): snapshot(value) plus, for the core log-only types, the data rule
 * that seeds.py applies on append and on load (kind 1 turn/start, 2 step/start|end, 3 assistant/chunk,
 * 4 tool/call, 5 user/message, 6 assistant/message, 7 tool/result, 8 turn/end; 0 no rule). It returns the frozen copy only when the copy plainly satisfies the rule;
 * anything else (invalid JSON, a rule failure, an integral float where an integer belongs, too deep)
 * returns GIVE_UP and the Python path decides, with its exact result or error. Like snapshot(), it
 * never decides on its own that something is invalid. */

static int
pos_int(PyObject *v)
{
    if (v == NULL || !PyLong_CheckExact(v)) {
        return 0;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    return !overflow && x > 0 && x <= MAX_SAFE;
}

static int
nonneg_int(PyObject *v)
{
    if (v == NULL || !PyLong_CheckExact(v)) {
        return 0;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    return !overflow && x >= 0 && x <= MAX_SAFE;
}

static PyObject *k_trigger, *k_call_id, *k_arguments, *k_message, *k_role, *k_source, *k_kind, *k_content,
    *k_provider, *k_model, *k_tool_call_id, *k_reason, *k_error, *k_provenance, *k_is_error;

static int
nonempty_str(PyObject *v)
{
    return v != NULL && PyUnicode_CheckExact(v) && PyUnicode_GET_LENGTH(v) > 0;
}

static int
str_is(PyObject *v, const char *text)
{
    return v != NULL && PyUnicode_CheckExact(v) && PyUnicode_CompareWithASCIIString(v, text) == 0;
}

/* The message rules of seeds.check_message_shape (5 user/message, 6 assistant/message, 7 tool/result). */
static int
message_holds(PyObject *d, long kind)
{
    PyObject *message = kind == 5 ? d : (PyDict_Check(d) ? PyDict_GetItem(d, k_message) : NULL);
    if (message == NULL || !PyDict_Check(message) || !nonempty_str(PyDict_GetItem(message, k_id))) {
        return 0;
    }
    if (!str_is(PyDict_GetItem(message, k_role), kind == 6 ? "assistant" : "user")) {
        return 0;
    }
    PyObject *source = PyDict_GetItem(message, k_source);
    if (source == NULL || !PyDict_Check(source)) {
        return 0;
    }
    PyObject *source_kind = PyDict_GetItem(source, k_kind);
    PyObject *content = PyDict_GetItem(message, k_content);
    if (!nonempty_str(source_kind) || content == NULL || !PyList_Check(content)) {
        return 0;
    }
    if (kind == 5) {
        return 1;
    }
    if (kind == 6) {
        return str_is(source_kind, "model") && nonempty_str(PyDict_GetItem(source, k_provider)) &&
               nonempty_str(PyDict_GetItem(source, k_model));
    }
    PyObject *call_id = PyDict_GetItem(source, k_call_id);
    if (!str_is(source_kind, "tool") || !nonempty_str(call_id) || PyList_GET_SIZE(content) != 1) {
        return 0;
    }
    PyObject *block = PyList_GET_ITEM(content, 0);
    if (!PyDict_Check(block) || !str_is(PyDict_GetItem(block, k_type), "tool-result")) {
        return 0;
    }
    PyObject *inner = PyDict_GetItem(block, k_content);
    PyObject *block_call = PyDict_GetItem(block, k_tool_call_id);
    return inner != NULL && PyList_Check(inner) && block_call != NULL && PyUnicode_CheckExact(block_call) &&
           PyUnicode_Compare(block_call, call_id) == 0;
}

/* seeds._turn_end_problem (8 turn/end). */
static int
turn_end_holds(PyObject *d)
{
    if (!PyDict_Check(d) || PyDict_GET_SIZE(d) != 2 || !pos_int(PyDict_GetItem(d, k_turn))) {
        return 0;
    }
    PyObject *reason = PyDict_GetItem(d, k_reason);
    if (reason == NULL || !PyDict_Check(reason)) {
        return 0;
    }
    PyObject *kind = PyDict_GetItem(reason, k_kind);
    if (kind == NULL || !PyUnicode_CheckExact(kind)) {
        return 0;
    }
    if (str_is(kind, "completed") || str_is(kind, "blocked") || str_is(kind, "max-tokens") ||
        str_is(kind, "interrupted")) {
        return PyDict_GET_SIZE(reason) == 1;
    }
    if (str_is(kind, "aborted")) {
        return PyDict_GetItem(reason, k_reason) != NULL;
    }
    if (str_is(kind, "disposed")) {
        return 0;
    }
    if (str_is(kind, "error")) {
        return PyDict_GetItem(reason, k_error) != NULL;
    }
    return 1;
}

/* 1 when the frozen dict d satisfies rule `kind`; 0 otherwise (never sets an error). */
static int
rule_holds(PyObject *d, long kind)
{
    if (kind >= 5 && kind <= 7) {
        return message_holds(d, kind);
    }
    if (kind == 8) {
        return turn_end_holds(d);
    }
    if (!PyDict_Check(d)) {
        return 0;
    }
    /* Keys of a frozen copy are exact str, so lookups cannot raise. */
    if (!pos_int(PyDict_GetItem(d, k_turn))) {
        return 0;
    }
    if (kind == 1) {
        return PyDict_GetItem(d, k_trigger) == NULL;
    }
    if (!nonneg_int(PyDict_GetItem(d, k_step))) {
        return 0;
    }
    if (kind == 2) {
        return 1;
    }
    if (kind == 3) {
        PyObject *chunk = PyDict_GetItem(d, k_chunk);
        if (chunk == NULL || !PyDict_Check(chunk)) {
            return 0;
        }
        PyObject *type = PyDict_GetItem(chunk, k_type);
        return type != NULL && PyUnicode_CheckExact(type);
    }
    if (kind == 4) {
        PyObject *call_id = PyDict_GetItem(d, k_call_id);
        PyObject *name = PyDict_GetItem(d, k_name);
        PyObject *arguments = PyDict_GetItem(d, k_arguments);
        return call_id != NULL && PyUnicode_CheckExact(call_id) && PyUnicode_GET_LENGTH(call_id) > 0 &&
               name != NULL && PyUnicode_CheckExact(name) && arguments != NULL && PyUnicode_CheckExact(arguments);
    }
    return 0;
}

static PyObject *
checked_snapshot(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "checked_snapshot(value, kind) expected");
        return NULL;
    }
    if (frozen_dict_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "agentlog._speedups is not configured");
        return NULL;
    }
    long kind = PyLong_AsLong(args[1]);
    if (kind == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *result = snap(args[0], 0);
    if (result == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_INCREF(give_up);
        return give_up;
    }
    if (kind > 0 && !rule_holds(result, kind)) {
        Py_DECREF(result);
        Py_INCREF(give_up);
        return give_up;
    }
    return result;
}

/* event4(cls, type, seq, time, data): the committed event {type, seq, time, data} as an untracked
 * instance of the dict subclass cls, or None when `time` is not a safe integer (the caller raises). */
static PyObject *
event4(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "event4(cls, type, seq, time, data) expected");
        return NULL;
    }
    PyObject *time = args[3];
    if (!PyLong_CheckExact(time)) {
        Py_RETURN_NONE;
    }
    int overflow = 0;
    long long t = PyLong_AsLongLongAndOverflow(time, &overflow);
    if (overflow || t > MAX_SAFE || t < -MAX_SAFE) {
        Py_RETURN_NONE;
    }
    PyObject *out = PyDict_Type.tp_new((PyTypeObject *)args[0], empty_tuple, NULL);
    if (out == NULL) {
        return NULL;
    }
    if (PyDict_SetItem(out, k_type, args[1]) < 0 || PyDict_SetItem(out, k_seq, args[2]) < 0 ||
        PyDict_SetItem(out, k_time, time) < 0 || PyDict_SetItem(out, k_data, args[4]) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    PyObject_GC_UnTrack(out);
    return out;
}

/* wall_clock_ms(): integer Unix epoch milliseconds (what time.time_ns() // 1_000_000 returns). */
static PyObject *
wall_clock_ms(PyObject *module, PyObject *unused)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLongLong((long long)ts.tv_sec * 1000LL + (long long)(ts.tv_nsec / 1000000));
}

/* group_raw_chunks(items, start, min_run, absent, run_cls) -> list or None
 *
 * chunkrows.compact_raw_chunks in one pass: items[start:] with every maximal stretch of at least min_run
 * raw assistant/chunk values of exactly a packed run member's shape replaced by run_cls(facts, last_time)
 * (facts as check_row's), or None when no stretch qualifies. A value qualifies exactly when the Python
 * twin (_raw_member) accepts it: key sets and key order as the members are built, exact int seq/time/
 * turn/step/index within their ranges, exact str type/text/id/name/argumentsDelta. This function never
 * refuses anything: a value that does not qualify is kept as is and validated like any other event. */

typedef struct {
    PyObject *kind; /* interned chunk type constant */
    PyObject *seq_obj, *time_obj, *turn_obj, *step_obj, *index_obj, *id, *name, *payload; /* borrowed */
    long long seq, time, turn, step;
} raw_member_t;

static int
key_is(PyObject *key, PyObject *want)
{
    if (key == want) {
        return 1;
    }
    if (!PyUnicode_CheckExact(key)) {
        return 0;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(key);
    if (n != PyUnicode_GET_LENGTH(want) || PyUnicode_KIND(key) != PyUnicode_KIND(want)) {
        return 0;
    }
    return memcmp(PyUnicode_DATA(key), PyUnicode_DATA(want), (size_t)n * PyUnicode_KIND(key)) == 0;
}

/* The dict's values in order when its keys are exactly `keys` (in that order), else 0. */
static int
ordered_values(PyObject *d, PyObject **keys, Py_ssize_t n, PyObject **values)
{
    if (!PyDict_CheckExact(d) || PyDict_GET_SIZE(d) != n) {
        return 0;
    }
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *value;
    while (PyDict_Next(d, &pos, &key, &value)) {
        if (i >= n || !key_is(key, keys[i])) {
            return 0;
        }
        values[i++] = value;
    }
    return i == n;
}

static int
ll_in(PyObject *v, long long lo, long long hi, long long *out)
{
    if (!PyLong_CheckExact(v)) {
        return 0;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (x < lo || x > hi) {
        return 0;
    }
    *out = x;
    return 1;
}

static int
raw_member(PyObject *value, raw_member_t *m)
{
    PyObject *env[4], *data[3], *chunk[5];
    PyObject *env_keys[4] = {k_type, k_seq, k_time, k_data};
    PyObject *data_keys[3] = {k_turn, k_step, k_chunk};
    if (!PyDict_CheckExact(value) || PyDict_GET_SIZE(value) != 4) {
        return 0;
    }
    PyObject *tag = PyDict_GetItemWithError(value, k_type); /* most events end here: not a chunk */
    if (tag == NULL || !key_is(tag, v_chunk_type)) {
        PyErr_Clear();
        return 0;
    }
    if (!ordered_values(value, env_keys, 4, env)) {
        return 0;
    }
    if (!key_is(env[0], v_chunk_type) || !PyUnicode_CheckExact(env[0])) {
        return 0;
    }
    if (!ll_in(env[1], 0, MAX_SAFE, &m->seq) || !ll_in(env[2], -MAX_SAFE, MAX_SAFE, &m->time) ||
        !ordered_values(env[3], data_keys, 3, data)) {
        return 0;
    }
    if (!ll_in(data[0], 1, MAX_SAFE, &m->turn) || !ll_in(data[1], 0, MAX_SAFE, &m->step)) {
        return 0;
    }
    PyObject *c = data[2];
    if (!PyDict_CheckExact(c)) {
        return 0;
    }
    Py_ssize_t size = PyDict_GET_SIZE(c);
    PyObject *kind = size >= 1 && size <= 5 ? PyDict_GetItemWithError(c, k_type) : NULL;
    if (kind == NULL || !PyUnicode_CheckExact(kind)) {
        PyErr_Clear();
        return 0;
    }
    m->id = NULL;
    m->name = NULL;
    if (key_is(kind, v_text_delta) || key_is(kind, v_reasoning_delta)) {
        PyObject *keys[3] = {k_type, k_index, k_text};
        if (size != 3 || !ordered_values(c, keys, 3, chunk) || !PyUnicode_CheckExact(chunk[2])) {
            return 0;
        }
        m->kind = key_is(kind, v_text_delta) ? v_text_delta : v_reasoning_delta;
        m->payload = chunk[2];
    }
    else if (key_is(kind, v_tool_delta)) {
        if (size == 5) {
            PyObject *keys[5] = {k_type, k_index, k_id, k_name, k_arguments_delta};
            if (!ordered_values(c, keys, 5, chunk) || !PyUnicode_CheckExact(chunk[3])) {
                return 0;
            }
            m->name = chunk[3];
            m->payload = chunk[4];
        }
        else {
            PyObject *keys[4] = {k_type, k_index, k_id, k_arguments_delta};
            if (size != 4 || !ordered_values(c, keys, 4, chunk)) {
                return 0;
            }
            m->payload = chunk[3];
        }
        if (!PyUnicode_CheckExact(chunk[2]) || !PyUnicode_CheckExact(m->payload)) {
            return 0;
        }
        m->id = chunk[2];
        m->kind = v_tool_delta;
    }
    else {
        return 0;
    }
    if (!PyLong_CheckExact(chunk[1])) {
        return 0;
    }
    m->seq_obj = env[1];
    m->time_obj = env[2];
    m->turn_obj = data[0];
    m->step_obj = data[1];
    m->index_obj = chunk[1];
    return 1;
}

static int
str_eq(PyObject *a, PyObject *b)
{
    if (a == NULL || b == NULL) {
        return a == b;
    }
    return key_is(a, b);
}

/* 1 when `m` continues the stretch whose first member is `first` and last member `last`; -1 on error. */
static int
continues(const raw_member_t *first, const raw_member_t *last, const raw_member_t *m)
{
    if (m->kind != first->kind || m->seq != last->seq + 1 || m->turn != first->turn || m->step != first->step ||
        !str_eq(m->id, first->id) || !str_eq(m->name, first->name)) {
        return 0;
    }
    long long gap = m->time - last->time;
    if (gap > MAX_SAFE || gap < -MAX_SAFE) {
        return 0;
    }
    return PyObject_RichCompareBool(m->index_obj, first->index_obj, Py_EQ);
}

static PyObject *
make_raw_run(PyObject *items, Py_ssize_t k, Py_ssize_t j, const raw_member_t *first, PyObject *absent,
             PyObject *run_cls)
{
    Py_ssize_t n = j - k;
    PyObject *dt = PyList_New(n - 1), *payload = PyList_New(n);
    if (dt == NULL || payload == NULL) {
        Py_XDECREF(dt);
        Py_XDECREF(payload);
        return NULL;
    }
    long long last_time = first->time;
    for (Py_ssize_t i = 0; i < n; i++) {
        raw_member_t m;
        if (!raw_member(PyList_GET_ITEM(items, k + i), &m)) { /* cannot happen: checked just before */
            Py_DECREF(dt);
            Py_DECREF(payload);
            PyErr_SetString(PyExc_RuntimeError, "group_raw_chunks: a member changed");
            return NULL;
        }
        if (i > 0) {
            PyObject *gap = PyLong_FromLongLong(m.time - last_time);
            if (gap == NULL) {
                Py_DECREF(dt);
                Py_DECREF(payload);
                return NULL;
            }
            PyList_SET_ITEM(dt, i - 1, gap);
        }
        last_time = m.time;
        Py_INCREF(m.payload);
        PyList_SET_ITEM(payload, i, m.payload);
    }
    PyObject *facts = PyTuple_Pack(11, first->kind == v_tool_delta ? Py_True : Py_False, first->kind, first->seq_obj,
                                   first->time_obj, first->turn_obj, first->step_obj, first->index_obj, dt, payload,
                                   first->id ? first->id : Py_None, first->name ? first->name : absent);
    Py_DECREF(dt);
    Py_DECREF(payload);
    if (facts == NULL) {
        return NULL;
    }
    PyObject *last = PyLong_FromLongLong(last_time);
    if (last == NULL) {
        Py_DECREF(facts);
        return NULL;
    }
    PyObject *run = PyObject_CallFunctionObjArgs(run_cls, facts, last, NULL);
    Py_DECREF(last);
    if (run != NULL) {
        /* As check_row's: str/int lists and a tuple that can never be part of a cycle. */
        PyObject_GC_UnTrack(dt);
        PyObject_GC_UnTrack(payload);
        PyObject_GC_UnTrack(facts);
        if (PyObject_IS_GC(run) && PyObject_GC_IsTracked(run)) {
            PyObject_GC_UnTrack(run);
        }
    }
    Py_DECREF(facts);
    return run;
}

static PyObject *
group_raw_chunks(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyList_CheckExact(args[0]) || !PyLong_Check(args[1]) || !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "group_raw_chunks(items, start, min_run, absent, run_cls) expected");
        return NULL;
    }
    PyObject *items = args[0], *absent = args[3], *run_cls = args[4];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), min_run = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (min_run < 1) {
        PyErr_SetString(PyExc_ValueError, "min_run must be at least 1");
        return NULL;
    }
    Py_ssize_t end = PyList_GET_SIZE(items);
    if (start < 0) {
        start = 0;
    }
    PyObject *out = NULL; /* created at the first run: items[start:k] copied, then built as we go */
    Py_ssize_t k = start;
    while (k < end) {
        raw_member_t first, last, m;
        if (!raw_member(PyList_GET_ITEM(items, k), &first)) {
            if (out != NULL && PyList_Append(out, PyList_GET_ITEM(items, k)) < 0) {
                goto fail;
            }
            k++;
            continue;
        }
        last = first;
        Py_ssize_t j = k + 1;
        while (j < end && raw_member(PyList_GET_ITEM(items, j), &m)) {
            int more = continues(&first, &last, &m);
            if (more < 0) {
                goto fail;
            }
            if (!more) {
                break;
            }
            last = m;
            j++;
        }
        if (j - k >= min_run) {
            if (out == NULL) {
                out = PyList_GetSlice(items, start, k);
                if (out == NULL) {
                    return NULL;
                }
            }
            PyObject *run = make_raw_run(items, k, j, &first, absent, run_cls);
            if (run == NULL) {
                goto fail;
            }
            int rc = PyList_Append(out, run);
            Py_DECREF(run);
            if (rc < 0) {
                goto fail;
            }
        }
        else if (out != NULL) {
            for (Py_ssize_t i = k; i < j; i++) {
                if (PyList_Append(out, PyList_GET_ITEM(items, i)) < 0) {
                    goto fail;
                }
            }
        }
        k = j;
    }
    if (out == NULL) {
        Py_RETURN_NONE;
    }
    return out;
fail:
    Py_XDECREF(out);
    return NULL;
}

/* --- one JSON text per line ------------------------------------------------------------------------
 * lines_are_single_values(lines: list[bytes]) -> bool
 * Whether every line is, lexically, exactly one JSON object or array: after leading whitespace it
 * opens with '{' or '[', its brackets (outside strings, with backslash escapes) close back to depth 0
 * only at its last non-whitespace byte, and no string is left open. The JSONL scanner parses many lines
 * with one parser call (joined into one array) and needs this to know that the array's elements are
 * the lines' values: a count alone would accept a value split over two lines beside a line holding two.
 * Strings are skipped with memchr (most of a log's bytes are inside strings). */
static int
line_is_single_value(const char *p, Py_ssize_t n)
{
    const char *end = p + n;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) end--;
    if (p >= end || (*p != '{' && *p != '[')) return 0;
    Py_ssize_t depth = 0;
    while (p < end) {
        char c = *p;
        if (c == '"') {
            const char *q = p + 1;
            for (;;) {
                const char *quote = memchr(q, '"', (size_t)(end - q));
                if (quote == NULL) return 0; /* a string left open */
                const char *b = quote;
                while (b > q && b[-1] == '\\') b--;
                if (((quote - b) & 1) == 0) { p = quote + 1; break; }
                q = quote + 1;
            }
            continue;
        }
        if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth <= 0) {
                return depth == 0 && p + 1 == end;
            }
        }
        p++;
    }
    return 0;
}

static PyObject *
lines_are_single_values(PyObject *Py_UNUSED(module), PyObject *lines)
{
    if (!PyList_CheckExact(lines)) {
        PyErr_SetString(PyExc_TypeError, "lines_are_single_values expects a list of bytes");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(lines);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!PyBytes_CheckExact(line)) Py_RETURN_FALSE;
        if (!line_is_single_value(PyBytes_AS_STRING(line), PyBytes_GET_SIZE(line))) Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

/* take_plain_events(parsed, start, n, events, row_tags) -> (stop, n)
 * The JSONL scanner's common case in one C loop: from parsed[start], append to `events` every value that
 * is a dict whose "type" is not a storage row tag (a str in row_tags) and whose "seq" is exactly the int
 * n (n then counts up). Stops at the first value that is anything else and returns its index and the
 * next expected seq; the scanner's Python loop then judges that value with every rule it has (a row, a
 * gap, a float seq, a defect) and calls again. Same outcome as the Python loop, value by value. */
static PyObject *
take_plain_events(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyList_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) || !PyLong_CheckExact(args[2]) ||
        !PyList_CheckExact(args[3]) || !PyAnySet_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "take_plain_events(list, int, int, list, frozenset) expected");
        return NULL;
    }
    PyObject *parsed = args[0], *events = args[3], *tags = args[4];
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    long long n = PyLong_AsLongLong(args[2]);
    if ((i == -1 || n == -1) && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(parsed);
    for (; i < count; i++) {
        PyObject *v = PyList_GET_ITEM(parsed, i);
        if (!PyDict_CheckExact(v)) {
            break;
        }
        PyObject *t = PyDict_GetItemWithError(v, k_type);
        if (t == NULL && PyErr_Occurred()) {
            return NULL;
        }
        if (t != NULL && PyUnicode_CheckExact(t)) {
            int tagged = PySet_Contains(tags, t);
            if (tagged < 0) {
                return NULL;
            }
            if (tagged) {
                break;
            }
        }
        PyObject *seq = PyDict_GetItemWithError(v, k_seq);
        if (seq == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            break;
        }
        if (!PyLong_CheckExact(seq)) {
            break;
        }
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(seq, &overflow);
        if (overflow || value != n) {
            if (value == -1 && PyErr_Occurred()) {
                return NULL;
            }
            break;
        }
        if (PyList_Append(events, v) < 0) {
            return NULL;
        }
        n++;
    }
    return Py_BuildValue("(nL)", i, n);
}

/* pack_chunk_runs(events) -> list
 *
 * chunkrows._py_pack_chunk_runs in C, with the same result for every input: the same rows (plain dicts,
 * same key order, the first member's own seq/time/turn/step/index objects), the very same objects for
 * everything stored verbatim, and the same exceptions. To keep that promise it does exactly the Python
 * twin's operations in the same order: a container that is neither an exact dict nor one of the
 * configured agentlog dict types (which override neither `get` nor `__len__`) is read through its own
 * `isinstance`, `len` and `.get`, and every comparison the twin makes with `==`/`!=` on a value of
 * unknown type is made with PyObject_RichCompareBool, so a value's own `__eq__` runs (and may raise)
 * as it does in Python. Only values whose type is exactly int, float or str are compared directly. */

#define PACK_MIN_RUN 3 /* chunkrows.MIN_RUN; the property test in test_chunk_rows.py holds the two equal */

static PyObject *s_get; /* "get", interned */

typedef struct {
    PyObject *kind;                                      /* interned delta constant, borrowed */
    PyObject *seq, *time, *turn, *step, *index, *id, *name, *payload; /* strong; id/name NULL when absent */
    long long seq_v, time_v;
} pack_delta_t;

static void
pack_delta_clear(pack_delta_t *d)
{
    Py_CLEAR(d->seq);
    Py_CLEAR(d->time);
    Py_CLEAR(d->turn);
    Py_CLEAR(d->step);
    Py_CLEAR(d->index);
    Py_CLEAR(d->id);
    Py_CLEAR(d->name);
    Py_CLEAR(d->payload);
}

static int
pack_trusted(PyObject *d)
{
    return PyDict_CheckExact(d) || type_in(Py_TYPE(d), dict_types);
}

/* isinstance(o, dict): 1, 0, or -1 with an error set. */
static int
pack_is_dict(PyObject *o)
{
    if (PyDict_Check(o)) {
        return 1;
    }
    if (PyLong_CheckExact(o) || PyUnicode_CheckExact(o) || PyFloat_CheckExact(o) || PyList_CheckExact(o) ||
        o == Py_None || PyBool_Check(o) || PyTuple_CheckExact(o)) {
        return 0;
    }
    return PyObject_IsInstance(o, (PyObject *)&PyDict_Type);
}

/* d.get(key): a new reference (None when missing), or NULL with an error set. */
static PyObject *
pack_get(PyObject *d, PyObject *key)
{
    if (pack_trusted(d)) {
        PyObject *v = PyDict_GetItemWithError(d, key);
        if (v == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
        Py_INCREF(v);
        return v;
    }
    return PyObject_CallMethodOneArg(d, s_get, key);
}

static Py_ssize_t
pack_len(PyObject *d)
{
    return pack_trusted(d) ? PyDict_GET_SIZE(d) : PyObject_Size(d);
}

/* chunkrows._is_number: an exact int, or an exact finite float. */
static int
pack_is_number(PyObject *v)
{
    return PyLong_CheckExact(v) || (PyFloat_CheckExact(v) && isfinite(PyFloat_AS_DOUBLE(v)));
}

/* chunkrows._same_number on two whitelisted numbers (identity included). */
static int
pack_same_number(PyObject *a, PyObject *b)
{
    if (a == b) {
        return 1;
    }
    if (Py_TYPE(a) != Py_TYPE(b)) {
        return 0;
    }
    if (PyLong_CheckExact(a)) {
        return PyObject_RichCompareBool(a, b, Py_EQ); /* exact ints: cannot fail */
    }
    double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
    return x == y && (signbit(x) != 0) == (signbit(y) != 0);
}

/* An exact int within [lo, hi] (chunkrows' seq/time checks). */
static int
pack_int_in(PyObject *v, long long lo, long long hi, long long *out)
{
    if (!PyLong_CheckExact(v)) {
        return 0;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || x < lo || x > hi) {
        return 0;
    }
    *out = x;
    return 1;
}

/* chunkrows._classify: 1 with `d` filled (strong references), 0 for "store verbatim", -1 on error. */
static int
pack_classify(PyObject *event, pack_delta_t *d)
{
    PyObject *tag = NULL, *data = NULL, *chunk = NULL, *kind = NULL, *text = NULL;
    int rc = pack_is_dict(event);
    if (rc <= 0) {
        return rc;
    }
    Py_ssize_t size = pack_len(event);
    if (size < 0) {
        return -1;
    }
    if (size != 4) {
        return 0;
    }
    tag = pack_get(event, k_type);
    if (tag == NULL) {
        return -1;
    }
    rc = PyObject_RichCompareBool(tag, v_chunk_type, Py_NE);
    Py_DECREF(tag);
    if (rc != 0) {
        return rc < 0 ? -1 : 0;
    }
    d->seq = pack_get(event, k_seq);
    if (d->seq == NULL) {
        goto error;
    }
    d->time = pack_get(event, k_time);
    if (d->time == NULL) {
        goto error;
    }
    data = pack_get(event, k_data);
    if (data == NULL) {
        goto error;
    }
    if (!pack_int_in(d->seq, 0, MAX_SAFE, &d->seq_v) || !pack_int_in(d->time, -MAX_SAFE, MAX_SAFE, &d->time_v)) {
        goto no;
    }
    rc = pack_is_dict(data);
    if (rc <= 0) {
        goto fail_or_no;
    }
    size = pack_len(data);
    if (size < 0) {
        goto error;
    }
    if (size != 3) {
        goto no;
    }
    if ((d->turn = pack_get(data, k_turn)) == NULL || (d->step = pack_get(data, k_step)) == NULL ||
        (chunk = pack_get(data, k_chunk)) == NULL) {
        goto error;
    }
    if (!pack_is_number(d->turn) || !pack_is_number(d->step)) {
        goto no;
    }
    rc = pack_is_dict(chunk);
    if (rc <= 0) {
        goto fail_or_no;
    }
    if ((d->index = pack_get(chunk, k_index)) == NULL) {
        goto error;
    }
    if (!pack_is_number(d->index)) {
        goto no;
    }
    if ((kind = pack_get(chunk, k_type)) == NULL) {
        goto error;
    }
    size = pack_len(chunk);
    if (size < 0) {
        goto error;
    }
    rc = PyObject_RichCompareBool(kind, v_text_delta, Py_EQ);
    if (rc == 0) {
        rc = PyObject_RichCompareBool(kind, v_reasoning_delta, Py_EQ);
    }
    if (rc < 0) {
        goto error;
    }
    if (rc) {
        if ((text = pack_get(chunk, k_text)) == NULL) {
            goto error;
        }
        if (size != 3 || !PyUnicode_CheckExact(text)) {
            goto no;
        }
        /* `_TEXT_DELTA if kind == _TEXT_DELTA else _REASONING_DELTA`: the twin compares again. */
        rc = PyObject_RichCompareBool(kind, v_text_delta, Py_EQ);
        if (rc < 0) {
            goto error;
        }
        d->kind = rc ? v_text_delta : v_reasoning_delta;
        d->payload = text;
        text = NULL;
        goto yes;
    }
    rc = PyObject_RichCompareBool(kind, v_tool_delta, Py_EQ);
    if (rc <= 0) {
        goto fail_or_no;
    }
    if ((d->id = pack_get(chunk, k_id)) == NULL || (d->payload = pack_get(chunk, k_arguments_delta)) == NULL) {
        goto error;
    }
    if (!PyUnicode_CheckExact(d->id) || !PyUnicode_CheckExact(d->payload)) {
        goto no;
    }
    if (size == 5) {
        if ((d->name = pack_get(chunk, k_name)) == NULL) {
            goto error;
        }
        if (!PyUnicode_CheckExact(d->name)) {
            goto no;
        }
    }
    else if (size != 4) {
        goto no;
    }
    d->kind = v_tool_delta;
yes:
    Py_DECREF(data);
    Py_DECREF(chunk);
    Py_DECREF(kind);
    return 1;
fail_or_no:
    if (rc < 0) {
        goto error;
    }
no:
    Py_XDECREF(data);
    Py_XDECREF(chunk);
    Py_XDECREF(kind);
    Py_XDECREF(text);
    pack_delta_clear(d);
    return 0;
error:
    Py_XDECREF(data);
    Py_XDECREF(chunk);
    Py_XDECREF(kind);
    Py_XDECREF(text);
    pack_delta_clear(d);
    return -1;
}

/* 1 when `m` extends the run whose first member is `first` (the twin's condition, same order). */
static int
pack_continues(const pack_delta_t *first, long long last_seq, long long last_time, const pack_delta_t *m)
{
    long long gap = m->time_v - last_time;
    if (m->kind != first->kind || m->seq_v != last_seq + 1 || gap < -MAX_SAFE || gap > MAX_SAFE) {
        return 0;
    }
    if (!pack_same_number(m->turn, first->turn) || !pack_same_number(m->step, first->step) ||
        !pack_same_number(m->index, first->index)) {
        return 0;
    }
    /* Same kind, so both ids are NULL (text) or both exact str; a name is NULL (absent) or an exact str. */
    if (m->id != NULL && PyUnicode_Compare(m->id, first->id) != 0) {
        return 0;
    }
    if ((m->name == NULL) != (first->name == NULL)) {
        return 0;
    }
    return m->name == NULL || PyUnicode_Compare(m->name, first->name) == 0;
}

/* chunkrows._emit: the run as one row when it has PACK_MIN_RUN members, else its events verbatim. */
static int
pack_emit(PyObject *out, PyObject *run, const pack_delta_t *first, PyObject *dt, PyObject *payloads)
{
    Py_ssize_t n = PyList_GET_SIZE(run);
    if (n < PACK_MIN_RUN) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (PyList_Append(out, PyList_GET_ITEM(run, i)) < 0) {
                return -1;
            }
        }
        return 0;
    }
    PyObject *data = PyDict_New(), *row = NULL;
    if (data == NULL) {
        return -1;
    }
    PyObject *tag = first->kind == v_tool_delta ? v_tool_row : (first->kind == v_text_delta ? v_text_row : v_reasoning_row);
    if (PyDict_SetItem(data, k_turn, first->turn) < 0 || PyDict_SetItem(data, k_step, first->step) < 0 ||
        PyDict_SetItem(data, k_index, first->index) < 0 || PyDict_SetItem(data, k_dt, dt) < 0) {
        goto error;
    }
    if (first->kind == v_tool_delta) {
        if (PyDict_SetItem(data, k_id, first->id) < 0 ||
            (first->name != NULL && PyDict_SetItem(data, k_name, first->name) < 0) ||
            PyDict_SetItem(data, k_args, payloads) < 0) {
            goto error;
        }
    }
    else if (PyDict_SetItem(data, k_texts, payloads) < 0) {
        goto error;
    }
    row = PyDict_New();
    if (row == NULL || PyDict_SetItem(row, k_type, tag) < 0 || PyDict_SetItem(row, k_seq0, first->seq) < 0 ||
        PyDict_SetItem(row, k_time0, first->time) < 0 || PyDict_SetItem(row, k_data, data) < 0 ||
        PyList_Append(out, row) < 0) {
        goto error;
    }
    Py_DECREF(row);
    Py_DECREF(data);
    return 0;
error:
    Py_XDECREF(row);
    Py_DECREF(data);
    return -1;
}

static PyObject *
pack_chunk_runs(PyObject *module, PyObject *events)
{
    PyObject *it = PyObject_GetIter(events);
    if (it == NULL) {
        return NULL;
    }
    PyObject *out = PyList_New(0), *run = NULL, *dt = NULL, *payloads = NULL, *event;
    pack_delta_t first = {0}, m = {0};
    int have_first = 0;
    long long last_seq = 0, last_time = 0;
    if (out == NULL) {
        Py_DECREF(it);
        return NULL;
    }
    while ((event = PyIter_Next(it)) != NULL) {
        int rc = pack_classify(event, &m);
        if (rc < 0) {
            Py_DECREF(event);
            goto error;
        }
        if (rc == 0) {
            if (have_first) {
                if (pack_emit(out, run, &first, dt, payloads) < 0) {
                    Py_DECREF(event);
                    goto error;
                }
                have_first = 0;
                pack_delta_clear(&first);
            }
            rc = PyList_Append(out, event);
            Py_DECREF(event);
            if (rc < 0) {
                goto error;
            }
            continue;
        }
        if (have_first) {
            if (pack_continues(&first, last_seq, last_time, &m)) {
                PyObject *gap = PyLong_FromLongLong(m.time_v - last_time);
                if (gap == NULL || PyList_Append(run, event) < 0 || PyList_Append(dt, gap) < 0 ||
                    PyList_Append(payloads, m.payload) < 0) {
                    Py_XDECREF(gap);
                    Py_DECREF(event);
                    pack_delta_clear(&m);
                    goto error;
                }
                Py_DECREF(gap);
                Py_DECREF(event);
                last_seq = m.seq_v;
                last_time = m.time_v;
                pack_delta_clear(&m);
                continue;
            }
            if (pack_emit(out, run, &first, dt, payloads) < 0) {
                Py_DECREF(event);
                pack_delta_clear(&m);
                goto error;
            }
            pack_delta_clear(&first);
        }
        first = m;
        memset(&m, 0, sizeof m);
        have_first = 1;
        Py_XSETREF(run, PyList_New(1));
        Py_XSETREF(dt, PyList_New(0));
        Py_XSETREF(payloads, PyList_New(1));
        if (run == NULL || dt == NULL || payloads == NULL) {
            Py_DECREF(event);
            goto error;
        }
        PyList_SET_ITEM(run, 0, event); /* steals the iterator's reference */
        Py_INCREF(first.payload);
        PyList_SET_ITEM(payloads, 0, first.payload);
        last_seq = first.seq_v;
        last_time = first.time_v;
    }
    if (PyErr_Occurred()) {
        goto error;
    }
    if (have_first && pack_emit(out, run, &first, dt, payloads) < 0) {
        goto error;
    }
    pack_delta_clear(&first);
    Py_XDECREF(run);
    Py_XDECREF(dt);
    Py_XDECREF(payloads);
    Py_DECREF(it);
    return out;
error:
    pack_delta_clear(&first);
    Py_XDECREF(run);
    Py_XDECREF(dt);
    Py_XDECREF(payloads);
    Py_DECREF(it);
    Py_DECREF(out);
    return NULL;
}

/* --- the token meter's streamed-answer price (agentlog/compaction/meter.py) ------------------------------ */

static PyObject *m_usage, *m_block, *m_block_type, *m_finish, *m_block_start, *m_block_end,
    *m_text_block, *m_reasoning_block;

static int
meter_init(void)
{
    m_usage = PyUnicode_InternFromString("usage");
    m_block = PyUnicode_InternFromString("block");
    m_block_type = PyUnicode_InternFromString("blockType");
    m_finish = PyUnicode_InternFromString("finish");
    m_block_start = PyUnicode_InternFromString("block-start");
    m_block_end = PyUnicode_InternFromString("block-end");
    m_text_block = PyUnicode_InternFromString("text");
    m_reasoning_block = PyUnicode_InternFromString("reasoning");
    return m_usage && m_block && m_block_type && m_finish && m_block_start && m_block_end && m_text_block &&
                   m_reasoning_block
               ? 0
               : -1;
}

/* JavaScript's text.length of an exact str: UTF-16 code units (a non-BMP code point counts 2). */
static Py_ssize_t
meter_js_units(PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (PyUnicode_KIND(s) != PyUnicode_4BYTE_KIND) {
        return n;
    }
    const Py_UCS4 *q = PyUnicode_4BYTE_DATA(s);
    Py_ssize_t units = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        units += q[i] > 0xFFFF;
    }
    return units;
}

/* 1 when the exact str equals the interned key; 0 otherwise (no error). */
static int
meter_str_is(PyObject *v, PyObject *key)
{
    return v == key || (PyUnicode_CheckExact(v) && PyUnicode_Compare(v, key) == 0);
}

/* 1 when a != b is true, 0 when false, -1 on error (cleared: the caller gives up). No identity shortcut:
 * the Python path compares with != (a NaN is unequal to itself there). */
static int
meter_ne(PyObject *a, PyObject *b)
{
    PyObject *r = PyObject_RichCompare(a, b, Py_NE);
    if (r == NULL) {
        PyErr_Clear();
        return -1;
    }
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (t < 0) {
        PyErr_Clear();
    }
    return t;
}

/* stream_text_length(log, sources, seq, turn, step): the one-pass fast path of the meter's
 * provider_assistant_tokens, in C. Returns the UTF-16 length of the streamed text block's text, -1 when the
 * stream builds no block (price 0), or None whenever the Python function must decide: the sources are not
 * strictly increasing exact ints in [0, seq), a cited event or value is not of the plain shape, a chunk is
 * of another kind, a comparison fails, or the fast path would turn general. None never means an error:
 * the Python path then re-reads the stream and gives the exact price or the exact error. */
static PyObject *
stream_text_length(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "stream_text_length(log, sources, seq, turn, step)");
        return NULL;
    }
    PyObject *log = args[0], *sources = args[1], *turn = args[3], *step = args[4];
    if (!PyList_Check(log) || !PyList_Check(sources) || !PyLong_CheckExact(args[2])) {
        Py_RETURN_NONE;
    }
    long long seq = PyLong_AsLongLong(args[2]);
    if (seq == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t count = PyList_GET_SIZE(sources);
    long long previous = -1;
    PyObject *index = NULL; /* borrowed: the block index of the first indexed chunk */
    PyObject *ended = NULL; /* borrowed: the first block-end's text */
    Py_ssize_t deltas = 0;
    int skip = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *s = PyList_GET_ITEM(sources, i);
        if (!PyLong_CheckExact(s)) {
            Py_RETURN_NONE;
        }
        long long source = PyLong_AsLongLong(s);
        if ((source == -1 && PyErr_Occurred()) || source <= previous || source >= seq ||
            source >= PyList_GET_SIZE(log)) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        previous = source;
        PyObject *cited = PyList_GET_ITEM(log, (Py_ssize_t)source);
        if (!PyDict_Check(cited)) {
            Py_RETURN_NONE;
        }
        PyObject *cdata = PyDict_GetItemWithError(cited, k_data);
        PyObject *ctype = cdata ? PyDict_GetItemWithError(cited, k_type) : NULL;
        if (ctype == NULL || !PyDict_Check(cdata) || !meter_str_is(ctype, v_chunk_type)) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        PyObject *cturn = PyDict_GetItemWithError(cdata, k_turn);
        PyObject *cstep = cturn ? PyDict_GetItemWithError(cdata, k_step) : NULL;
        if (cstep == NULL || meter_ne(cturn, turn) != 0 || meter_ne(cstep, step) != 0) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        if (skip) {
            continue;
        }
        PyObject *chunk = PyDict_GetItemWithError(cdata, k_chunk);
        PyObject *kind = chunk && PyDict_Check(chunk) ? PyDict_GetItemWithError(chunk, k_type) : NULL;
        if (kind == NULL || !PyUnicode_CheckExact(kind)) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        int delta = meter_str_is(kind, v_text_delta) || meter_str_is(kind, v_reasoning_delta);
        int start = !delta && meter_str_is(kind, m_block_start);
        int end = !delta && !start && meter_str_is(kind, m_block_end);
        if (delta || start || end) {
            PyObject *chunk_index = PyDict_GetItemWithError(chunk, k_index);
            if (chunk_index == NULL) {
                PyErr_Clear();
                Py_RETURN_NONE;
            }
            if (index == NULL) {
                index = chunk_index;
            }
            else if (meter_ne(chunk_index, index) != 0) {
                Py_RETURN_NONE; /* another block: the general path */
            }
            if (delta) {
                PyObject *text = PyDict_GetItemWithError(chunk, k_text);
                if (text == NULL || !PyUnicode_CheckExact(text)) {
                    PyErr_Clear();
                    Py_RETURN_NONE;
                }
                if (ended == NULL) {
                    deltas += meter_js_units(text);
                }
            }
            else if (start) {
                PyObject *block_type = PyDict_GetItemWithError(chunk, m_block_type);
                if (block_type == NULL || !(meter_str_is(block_type, m_text_block) || meter_str_is(block_type, m_reasoning_block))) {
                    PyErr_Clear();
                    Py_RETURN_NONE;
                }
            }
            else if (ended == NULL) {
                PyObject *block = PyDict_GetItemWithError(chunk, m_block);
                if (block == NULL || !PyDict_Check(block)) {
                    PyErr_Clear();
                    Py_RETURN_NONE;
                }
                PyObject *block_kind = PyDict_GetItemWithError(block, k_type);
                PyObject *text = block_kind ? PyDict_GetItemWithError(block, k_text) : NULL;
                if (text == NULL || !PyUnicode_CheckExact(text) ||
                    !(meter_str_is(block_kind, m_text_block) || meter_str_is(block_kind, m_reasoning_block))) {
                    PyErr_Clear();
                    Py_RETURN_NONE;
                }
                ended = text;
            }
        }
        else if (meter_str_is(kind, m_finish)) {
            PyObject *reason = PyDict_GetItemWithError(chunk, k_reason);
            if (reason == NULL || !PyDict_Check(reason) || PyDict_GetItemWithError(reason, k_kind) == NULL) {
                PyErr_Clear();
                Py_RETURN_NONE;
            }
            skip = 1;
        }
        else if (meter_str_is(kind, m_usage)) {
            if (PyDict_GetItemWithError(chunk, m_usage) == NULL) {
                PyErr_Clear();
                Py_RETURN_NONE;
            }
        }
        else {
            Py_RETURN_NONE;
        }
    }
    if (index == NULL) {
        return PyLong_FromLong(-1);
    }
    return PyLong_FromSsize_t(ended != NULL ? meter_js_units(ended) : deltas);
}

/* persistence.legacy.current_log_types: one pass over a parsed stored log (ChunkRun items, of class
 * `skip`, are stepped over). The set of event types present when every other item is a dict with an exact
 * str type that assert_supported_events accepts and normalize_stored_events returns unchanged without an
 * error; otherwise None, and the full checks decide (they give the exact result or error). Judging an
 * event "needs the full path" when in doubt is always safe: it only costs the old passes. */
static int
legacy_current(PyObject *type, PyObject *event)
{
    PyObject *data = PyDict_GetItem(event, k_data);
    int is_dict = data != NULL && PyDict_Check(data);
    if (str_is(type, "turn/start")) {
        return !is_dict || PyDict_GetItem(data, k_trigger) == NULL;
    }
    if (str_is(type, "turn/end")) {
        return is_dict ? turn_end_holds(data) : 1;
    }
    if (str_is(type, "user/message")) {
        return !is_dict || PyDict_GetItem(data, k_id) != NULL || PyDict_GetItem(data, k_role) != NULL ||
               PyDict_GetItem(data, k_message) != NULL || PyDict_GetItem(data, k_content) == NULL ||
               PyDict_GetItem(data, k_source) == NULL;
    }
    if (str_is(type, "assistant/message")) {
        return !is_dict || PyDict_GetItem(data, k_message) != NULL || PyDict_GetItem(data, k_content) == NULL ||
               PyDict_GetItem(data, k_provenance) == NULL;
    }
    if (str_is(type, "tool/result")) {
        return !is_dict || PyDict_GetItem(data, k_message) != NULL || PyDict_GetItem(data, k_call_id) == NULL ||
               PyDict_GetItem(data, k_content) == NULL || PyDict_GetItem(data, k_is_error) == NULL;
    }
    if (str_is(type, "request/header")) {
        PyObject *reason = is_dict ? PyDict_GetItem(data, k_reason) : NULL;
        return reason == NULL || (PyUnicode_CheckExact(reason) && !str_is(reason, "fallback"));
    }
    return !str_is(type, "steering/message") && !str_is(type, "request/header-delta") && !str_is(type, "mode/set");
}

static PyObject *
current_log_types(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "current_log_types(list, skip_class) expected");
        return NULL;
    }
    PyObject *items = args[0];
    PyObject *skip = args[1];
    PyObject *present = PySet_New(NULL);
    if (present == NULL) {
        return NULL;
    }
    PyObject *last = NULL; /* the previous type added: consecutive events often share it */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *event = PyList_GET_ITEM(items, i);
        if ((PyObject *)Py_TYPE(event) == skip) {
            continue;
        }
        if (!PyDict_Check(event)) {
            goto full;
        }
        PyObject *type = PyDict_GetItem(event, k_type);
        if (type == NULL || !PyUnicode_CheckExact(type) || !legacy_current(type, event)) {
            goto full;
        }
        if (type != last) {
            if (PySet_Add(present, type) < 0) {
                Py_DECREF(present);
                return NULL;
            }
            last = type;
        }
    }
    return present;
full:
    Py_DECREF(present);
    Py_RETURN_NONE;
}

/* ascii_term_rows(documents) -> (copy_text, fallback)
 * The search index's term rows of the ASCII documents among `documents` (a list of (int doc, str text,
 * str columns)), as the text of a PostgreSQL COPY: one line "term\tdoc\tfrequency\t{pos,pos,...}\tcolumns"
 * per distinct term of a document, positions ascending (`columns`: the document's own, already COPY text,
 * copied as they are). The terms are exactly FTS5 unicode61's on ASCII text (the SQLite
 * provider's definition, checked against FTS5 itself by a property test): a term is a maximal run of
 * [A-Za-z0-9], folded to lower case, cut to FTS5's 32,768-byte limit; its position counts the terms before
 * it. Non-ASCII text (or an unexpected item) is not decided here: its index in `documents` is listed in
 * `fallback` for FTS5 to tokenize. Why in C: tokenizing in a private FTS5 table and reading its fts5vocab
 * back costs ~1 µs per term instance, most of a PostgreSQL index build; this is ~20x less, without the GIL. */
#define TERM_MAX 32768

typedef struct {
    Py_ssize_t start; /* offset of the folded term in the arena */
    Py_ssize_t len;
    Py_ssize_t count;
    Py_ssize_t head, tail; /* first and last position of the term (linked by next_pos) */
} term_slot;

typedef struct {
    char *data;
    size_t len, cap;
} out_buf;

static int
out_reserve(out_buf *b, size_t extra)
{
    if (b->len + extra <= b->cap) {
        return 0;
    }
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < b->len + extra) {
        cap *= 2;
    }
    char *grown = realloc(b->data, cap);
    if (grown == NULL) {
        return -1;
    }
    b->data = grown;
    b->cap = cap;
    return 0;
}

static char *
put_int(char *p, long long v)
{
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? (unsigned long long)(-(v + 1)) + 1 : (unsigned long long)v;
    if (v < 0) {
        *p++ = '-';
    }
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (n) {
        *p++ = digits[--n];
    }
    return p;
}

typedef struct {
    term_slot *slots;
    Py_ssize_t *table; /* open addressing: slot index + 1, 0 = empty */
    Py_ssize_t *next_pos;
    char *arena;
    size_t slots_cap, table_cap, pos_cap, arena_cap;
} term_scratch;

static int
grow(void **p, size_t *cap, size_t need, size_t item)
{
    if (need <= *cap) {
        return 0;
    }
    size_t cap2 = *cap ? *cap : 256;
    while (cap2 < need) {
        cap2 *= 2;
    }
    void *q = realloc(*p, cap2 * item);
    if (q == NULL) {
        return -1;
    }
    *p = q;
    *cap = cap2;
    return 0;
}

/* Appends one ASCII document's rows to out; -1 when memory runs out. */
static int
ascii_doc_rows(const unsigned char *text, Py_ssize_t n, long long doc, const char *extra, Py_ssize_t extra_len,
               term_scratch *s, out_buf *out)
{
    /* Upper bounds: at most (n + 1) / 2 terms, at most n bytes of folded term text. */
    size_t most = (size_t)(n + 1) / 2 + 1;
    size_t table_need = 16;
    while (table_need < 2 * most) {
        table_need *= 2;
    }
    if (grow((void **)&s->slots, &s->slots_cap, most, sizeof(term_slot)) < 0 ||
        grow((void **)&s->next_pos, &s->pos_cap, most, sizeof(Py_ssize_t)) < 0 ||
        grow((void **)&s->arena, &s->arena_cap, (size_t)n + 1, 1) < 0) {
        return -1;
    }
    if (table_need > s->table_cap) {
        Py_ssize_t *t = realloc(s->table, table_need * sizeof(Py_ssize_t));
        if (t == NULL) {
            return -1;
        }
        s->table = t;
        s->table_cap = table_need;
    }
    size_t mask = table_need - 1;
    memset(s->table, 0, table_need * sizeof(Py_ssize_t));
    Py_ssize_t slots = 0, position = 0, arena_len = 0;
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = text[i];
        int alnum = (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
        if (!alnum) {
            i++;
            continue;
        }
        Py_ssize_t start = arena_len, len = 0;
        uint64_t h = 1469598103934665603ULL;
        while (i < n) {
            c = text[i];
            if (c >= '0' && c <= '9') {
            } else if ((c | 32) >= 'a' && (c | 32) <= 'z') {
                c |= 32;
            } else {
                break;
            }
            if (len < TERM_MAX) {
                s->arena[arena_len++] = (char)c;
                len++;
                h = (h ^ c) * 1099511628211ULL;
            }
            i++;
        }
        size_t probe = (size_t)h & mask;
        Py_ssize_t found = -1;
        while (s->table[probe]) {
            term_slot *t = &s->slots[s->table[probe] - 1];
            if (t->len == len && memcmp(s->arena + t->start, s->arena + start, (size_t)len) == 0) {
                found = s->table[probe] - 1;
                break;
            }
            probe = (probe + 1) & mask;
        }
        s->next_pos[position] = -1;
        if (found < 0) {
            term_slot *t = &s->slots[slots];
            t->start = start;
            t->len = len;
            t->count = 1;
            t->head = t->tail = position;
            s->table[probe] = ++slots;
        } else {
            term_slot *t = &s->slots[found];
            arena_len = start; /* the term is known: its copy is not kept */
            t->count++;
            s->next_pos[t->tail] = position;
            t->tail = position;
        }
        position++;
    }
    for (Py_ssize_t k = 0; k < slots; k++) {
        term_slot *t = &s->slots[k];
        /* term, doc, count, and up to 21 bytes per position */
        if (out_reserve(out, (size_t)t->len + 80 + (size_t)extra_len + (size_t)t->count * 22) < 0) {
            return -1;
        }
        char *p = out->data + out->len;
        memcpy(p, s->arena + t->start, (size_t)t->len);
        p += t->len;
        *p++ = '\t';
        p = put_int(p, doc);
        *p++ = '\t';
        p = put_int(p, (long long)t->count);
        *p++ = '\t';
        *p++ = '{';
        for (Py_ssize_t pos = t->head; pos >= 0; pos = s->next_pos[pos]) {
            p = put_int(p, (long long)pos);
            *p++ = ',';
        }
        p[-1] = '}';
        *p++ = '\t';
        memcpy(p, extra, (size_t)extra_len);
        p += extra_len;
        *p++ = '\n';
        out->len = (size_t)(p - out->data);
    }
    return 0;
}

static PyObject *
ascii_term_rows(PyObject *Py_UNUSED(module), PyObject *documents)
{
    PyObject *items = PySequence_Tuple(documents); /* holds every text while the GIL is released */
    if (items == NULL) {
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(items);
    PyObject *fallback = PyList_New(0);
    long long *docs = PyMem_Malloc(sizeof(long long) * (size_t)(count ? count : 1));
    const unsigned char **texts = PyMem_Malloc(sizeof(char *) * (size_t)(count ? count : 1));
    Py_ssize_t *lengths = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(count ? count : 1));
    const char **extras = PyMem_Malloc(sizeof(char *) * (size_t)(count ? count : 1));
    Py_ssize_t *extra_lengths = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(count ? count : 1));
    PyObject *result = NULL;
    if (fallback == NULL || docs == NULL || texts == NULL || lengths == NULL || extras == NULL ||
        extra_lengths == NULL) {
        if (fallback != NULL) {
            PyErr_NoMemory();
        }
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        texts[i] = NULL;
        if (PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 3 && PyLong_CheckExact(PyTuple_GET_ITEM(item, 0)) &&
            PyUnicode_CheckExact(PyTuple_GET_ITEM(item, 1)) && PyUnicode_IS_ASCII(PyTuple_GET_ITEM(item, 1)) &&
            PyUnicode_CheckExact(PyTuple_GET_ITEM(item, 2))) {
            int overflow = 0;
            long long doc = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(item, 0), &overflow);
            if (!overflow && !(doc == -1 && PyErr_Occurred())) {
                /* UTF-8 cached on the str object, which `items` keeps alive; a lone surrogate fails here */
                extras[i] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(item, 2), &extra_lengths[i]);
                if (extras[i] == NULL) {
                    goto done;
                }
                docs[i] = doc;
                texts[i] = (const unsigned char *)PyUnicode_1BYTE_DATA(PyTuple_GET_ITEM(item, 1));
                lengths[i] = PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(item, 1));
                continue;
            }
            PyErr_Clear();
        }
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL || PyList_Append(fallback, index) < 0) {
            Py_XDECREF(index);
            goto done;
        }
        Py_DECREF(index);
    }
    out_buf out = {NULL, 0, 0};
    term_scratch scratch = {NULL, NULL, NULL, NULL, 0, 0, 0, 0};
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count && !failed; i++) {
        if (texts[i] != NULL &&
            ascii_doc_rows(texts[i], lengths[i], docs[i], extras[i], extra_lengths[i], &scratch, &out) < 0) {
            failed = 1;
        }
    }
    Py_END_ALLOW_THREADS
    free(scratch.slots);
    free(scratch.table);
    free(scratch.next_pos);
    free(scratch.arena);
    if (failed) {
        free(out.data);
        PyErr_NoMemory();
        goto done;
    }
    PyObject *text = PyUnicode_FromStringAndSize(out.data ? out.data : "", (Py_ssize_t)out.len);
    free(out.data);
    if (text != NULL) {
        result = PyTuple_Pack(2, text, fallback);
        Py_DECREF(text);
    }
done:
    PyMem_Free(docs);
    PyMem_Free(texts);
    PyMem_Free(lengths);
    PyMem_Free(extras);
    PyMem_Free(extra_lengths);
    Py_XDECREF(fallback);
    Py_DECREF(items);
    return result;
}

/* repeated_term_marks(positions, length) -> int or None
 * How many marks FTS5 highlight() makes for a phrase of one term repeated `length` times in a document
 * whose token positions of that term are `positions` (a list of ints): an occurrence starts at p when
 * p, p+1, ..., p+length-1 are all positions; occurrences closer than `length` to the previous one
 * overlap and merge into one mark. None when the positions are not a strictly ascending list of small
 * ints (the Python twin, agentlog.query.postgres._phrase_marks, then decides). Why in C: a common
 * word's candidates carry hundreds of positions each, and counting them in Python was a third of such a
 * query's time. */
static PyObject *
repeated_term_marks(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "repeated_term_marks expects (list of int, int)");
        return NULL;
    }
    PyObject *positions = args[0];
    long length = PyLong_AsLong(args[1]);
    if (length == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (length < 1) {
        Py_RETURN_NONE;
    }
    Py_ssize_t n = PyList_GET_SIZE(positions);
    long long *p = PyMem_Malloc(sizeof(long long) * (size_t)(n ? n : 1));
    if (p == NULL) {
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(positions, i);
        int overflow = 0;
        long long v = PyLong_CheckExact(item) ? PyLong_AsLongLongAndOverflow(item, &overflow) : 0;
        if (!PyLong_CheckExact(item) || overflow || (v == -1 && PyErr_Occurred()) || v < 0 || v > (1LL << 40) ||
            (i > 0 && v <= p[i - 1])) {
            PyErr_Clear();
            PyMem_Free(p);
            Py_RETURN_NONE;
        }
        p[i] = v;
    }
    long long span = (long long)length - 1, marks = 0, previous = -1;
    int any = 0;
    for (Py_ssize_t i = 0; i + span < n; i++) {
        if (p[i + span] - p[i] != span) {
            continue; /* strictly ascending: the run p[i]..p[i]+span is whole only if its ends are span apart */
        }
        if (!any || p[i] - previous >= (long long)length) {
            marks++;
        }
        previous = p[i];
        any = 1;
    }
    PyMem_Free(p);
    return PyLong_FromLongLong(marks);
}

static PyMethodDef methods[] = {
    {"wall_clock_ms", (PyCFunction)wall_clock_ms, METH_NOARGS, "Integer Unix epoch milliseconds."},
    {"checked_snapshot", (PyCFunction)(void (*)(void))checked_snapshot, METH_FASTCALL,
     "snapshot() plus a core data rule; GIVE_UP whenever the Python path must decide."},
    {"event4", (PyCFunction)(void (*)(void))event4, METH_FASTCALL,
     "An untracked committed event {type, seq, time, data}, or None for a non-safe-integer time."},
    {"snapshot", (PyCFunction)snapshot, METH_O, "Frozen copy of a plainly valid JSON value, or GIVE_UP."},
    {"restore_events", (PyCFunction)(void (*)(void))restore_events, METH_FASTCALL,
     "Envelope-check, freeze and seal restored events; report the ones needing Python checks."},
    {"freeze_owned_tree", (PyCFunction)freeze_owned_tree, METH_O,
     "Freeze an exclusively owned parsed graph in place (no copy), or GIVE_UP."},
    {"untrack", (PyCFunction)untrack, METH_O, "Stop the cycle collector from tracking an acyclic object."},
    {"check_row", (PyCFunction)(void (*)(void))check_row, METH_FASTCALL,
     "Every check of a parsed packed chunk row without expanding it: (facts, last time), or None."},
    {"expand_row", (PyCFunction)(void (*)(void))expand_row, METH_FASTCALL,
     "Expand a validated packed chunk row into frozen, untracked events."},
    {"group_raw_chunks", (PyCFunction)(void (*)(void))group_raw_chunks, METH_FASTCALL,
     "Raw chunk events of exactly a packed run's members' shape grouped into runs, or None."},
    {"pack_chunk_runs", (PyCFunction)pack_chunk_runs, METH_O,
     "One batch in storage form: every run of MIN_RUN+ consecutive same-block deltas packed into a row."},
    {"take_plain_events", (PyCFunction)(void (*)(void))take_plain_events, METH_FASTCALL,
     "Append the plain, contiguous parsed events from a start index; return (stop, next seq)."},
    {"lines_are_single_values", (PyCFunction)lines_are_single_values, METH_O,
     "Whether every line is lexically exactly one JSON object or array."},
    {"current_log_types", (PyCFunction)(void (*)(void))current_log_types, METH_FASTCALL,
     "The types of a stored log that the legacy checks pass unchanged, or None."},
    {"seal", (PyCFunction)(void (*)(void))seal, METH_FASTCALL, "Untracked dict-subclass instance from a dict."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL, "Set the frozen types and sentinel."},
    {"ascii_term_rows", (PyCFunction)ascii_term_rows, METH_O,
     "The search index's COPY term rows of the ASCII (doc, text, columns) triples, and the indices left to FTS5."},
    {"repeated_term_marks", (PyCFunction)(void (*)(void))repeated_term_marks, METH_FASTCALL,
     "FTS5 highlight()'s mark count for one term repeated as a phrase, from its sorted positions, or None."},
    {"stream_text_length", (PyCFunction)(void (*)(void))stream_text_length, METH_FASTCALL,
     "The token meter's streamed text length (UTF-16 units), -1 for no block, or None: Python decides."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "agentlog._speedups", "Optional C accelerator for the JSON gate.", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    empty_tuple = PyTuple_New(0);
    if (empty_tuple == NULL) {
        return NULL;
    }
    k_type = PyUnicode_InternFromString("type");
    k_seq = PyUnicode_InternFromString("seq");
    k_time = PyUnicode_InternFromString("time");
    k_data = PyUnicode_InternFromString("data");
    k_surface_op = PyUnicode_InternFromString("surfaceOp");
    k_sources = PyUnicode_InternFromString("sourceEventSeqs");
    k_ignorable = PyUnicode_InternFromString("ignorable");
    if (!k_type || !k_seq || !k_time || !k_data || !k_surface_op || !k_sources || !k_ignorable) {
        return NULL;
    }
    k_turn = PyUnicode_InternFromString("turn");
    k_step = PyUnicode_InternFromString("step");
    k_chunk = PyUnicode_InternFromString("chunk");
    k_index = PyUnicode_InternFromString("index");
    k_text = PyUnicode_InternFromString("text");
    k_id = PyUnicode_InternFromString("id");
    k_name = PyUnicode_InternFromString("name");
    k_arguments_delta = PyUnicode_InternFromString("argumentsDelta");
    v_chunk_type = PyUnicode_InternFromString("assistant/chunk");
    s_get = PyUnicode_InternFromString("get");
    if (s_get == NULL) {
        return NULL;
    }
    k_seq0 = PyUnicode_InternFromString("seq0");
    k_time0 = PyUnicode_InternFromString("time0");
    k_dt = PyUnicode_InternFromString("dt");
    k_texts = PyUnicode_InternFromString("texts");
    k_args = PyUnicode_InternFromString("args");
    v_text_row = PyUnicode_InternFromString("text-chunks");
    v_reasoning_row = PyUnicode_InternFromString("reasoning-chunks");
    v_tool_row = PyUnicode_InternFromString("tool-call-chunks");
    v_text_delta = PyUnicode_InternFromString("text-delta");
    v_reasoning_delta = PyUnicode_InternFromString("reasoning-delta");
    v_tool_delta = PyUnicode_InternFromString("tool-call-delta");
    if (!k_seq0 || !k_time0 || !k_dt || !k_texts || !k_args || !v_text_row || !v_reasoning_row || !v_tool_row ||
        !v_text_delta || !v_reasoning_delta || !v_tool_delta) {
        return NULL;
    }
    k_trigger = PyUnicode_InternFromString("trigger");
    k_call_id = PyUnicode_InternFromString("callId");
    k_arguments = PyUnicode_InternFromString("arguments");
    k_message = PyUnicode_InternFromString("message");
    k_role = PyUnicode_InternFromString("role");
    k_source = PyUnicode_InternFromString("source");
    k_kind = PyUnicode_InternFromString("kind");
    k_content = PyUnicode_InternFromString("content");
    k_provider = PyUnicode_InternFromString("provider");
    k_model = PyUnicode_InternFromString("model");
    k_tool_call_id = PyUnicode_InternFromString("toolCallId");
    k_reason = PyUnicode_InternFromString("reason");
    k_error = PyUnicode_InternFromString("error");
    k_provenance = PyUnicode_InternFromString("provenance");
    k_is_error = PyUnicode_InternFromString("isError");
    if (!k_provenance || !k_is_error) {
        return NULL;
    }
    if (!k_trigger || !k_call_id || !k_arguments || !k_message || !k_role || !k_source || !k_kind || !k_content ||
        !k_provider || !k_model || !k_tool_call_id || !k_reason || !k_error) {
        return NULL;
    }
    if (!k_turn || !k_step || !k_chunk || !k_index || !k_text || !k_id || !k_name || !k_arguments_delta ||
        !v_chunk_type) {
        return NULL;
    }
    if (meter_init() < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&moduledef);
    if (module == NULL) {
        return NULL;
    }
    /* VERSION: agentlog._accel refuses (falls back to pure Python) a build whose VERSION is not the one it
     * expects, i.e. a stale .so left over from an older source. CHUNK_ROW_TAGS: the row tags this file
     * compares against, exported so a test holds them equal to kernel.chunkrows.CHUNK_ROW_TAGS. */
    PyObject *tags = PyTuple_Pack(3, v_text_row, v_reasoning_row, v_tool_row);
    if (tags == NULL || PyModule_AddObject(module, "CHUNK_ROW_TAGS", tags) < 0) {
        Py_XDECREF(tags); /* PyModule_AddObject steals the reference only on success */
        Py_DECREF(module);
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "VERSION", SPEEDUPS_VERSION) < 0) {
        Py_DECREF(module); /* tags is the module's now */
        return NULL;
    }
    return module;
}
