// The psyne torch backend's blocking all_reduce, in C++ (built on first use by
// psyne/_torch_hot.py against the installed torch; see there).
//
// `dist.all_reduce(t)` on a Python ProcessGroup calls the group's `allreduce(tensors, opts)`.
// Read from Python, every check of that call is an attribute read (`opts.reduceOp` builds a new
// object each time) and cost as much as the 8-byte all-reduce itself
// (results/torch-ddp/floor-split-2026-11-27/). The group's `allreduce` is an instance of `Hot`
// instead: it reads the options and the tensors as C++ fields and, when the call is the common
// one (blocking, dense contiguous CPU tensors of psyne's dtypes, an op other than PREMUL_SUM, no
// tensor of psyne's shared buffers on the group), runs psyne's all-reduce through the table
// psyne._native exports (`_torch_hot_api`, python/src/torch_hot.rs). Every other call, and any
// call it cannot read, goes to the Python method unchanged (`slow`), which also raises the
// precise errors.

#include <Python.h>

#include <ATen/Context.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/utils/pybind.h>

#include <array>
#include <cstdint>

namespace {

// psyne._native's table (python/src/torch_hot.rs `HotApi`), of this version.
constexpr uint32_t kApiVersion = 1;
struct HotApi {
  uint32_t version;
  int (*all_reduce)(PyObject* group, uint8_t dtype, uintptr_t addr, size_t len, uint8_t op);
};
const HotApi* api = nullptr;

constexpr int kNoTag = -1;
constexpr int kScalarTypes = static_cast<int>(c10::ScalarType::NumOptions);
constexpr int kRedOps = static_cast<int>(c10d::ReduceOp::UNUSED);

// One group's all_reduce: the call torch makes is `Hot(tensors, opts)`.
struct Hot {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* native;     // psyne._native.NativeGroup, the group as formed
  PyObject* canonical;  // the same group in canonical reduction order (deterministic mode)
  PyObject* slow;       // the Python all_reduce (a bound method): every other call
  PyObject* done;       // the finished Work every blocking call returns
  PyObject* shared;     // dict of the group's shared buffers: not empty, every call is slow
  int8_t dtype_tag[kScalarTypes];
  int8_t op_tag[kRedOps];
};

PyObject* call_slow(Hot* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

// The options of a blocking call psyne runs here, else null (and no exception).
const c10d::AllreduceOptions* blocking_options(PyObject* opts) {
  if (opts == Py_None) {
    return nullptr;
  }
  try {
    auto* o = pybind11::handle(opts).cast<c10d::AllreduceOptions*>();
    if (o == nullptr || o->asyncOp || o->sparseIndices.has_value()) {
      return nullptr;
    }
    return o;
  } catch (const pybind11::cast_error&) {
    return nullptr;
  }
}

// The psyne dtype tag of `item` when it is a tensor this path takes, else kNoTag.
int tensor_tag(const Hot* self, PyObject* item) {
  if (!THPVariable_Check(item)) {
    return kNoTag;
  }
  const at::Tensor& t = THPVariable_Unpack(item);
  if (!t.defined() || !t.is_cpu() || t.layout() != c10::kStrided || !t.is_contiguous()) {
    return kNoTag;
  }
  int type = static_cast<int>(t.scalar_type());
  return (type >= 0 && type < kScalarTypes) ? self->dtype_tag[type] : kNoTag;
}

// Whether this path takes every tensor of `tensors` (a tuple): all are checked before the first
// is reduced, so a call that goes to the Python method goes there whole.
bool all_taken(const Hot* self, PyObject* tensors) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tensors); i++) {
    if (tensor_tag(self, PyTuple_GET_ITEM(tensors, i)) == kNoTag) {
      return false;
    }
  }
  return true;
}

PyObject* hot_call(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Hot* self = reinterpret_cast<Hot*>(callable);
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (kwnames != nullptr || nargs != 2 || !PyList_CheckExact(args[0]) ||
      PyDict_GET_SIZE(self->shared) != 0) {
    return call_slow(self, args, nargsf, kwnames);
  }
  const c10d::AllreduceOptions* opts = blocking_options(args[1]);
  if (opts == nullptr) {
    return call_slow(self, args, nargsf, kwnames);
  }
  int kind = static_cast<int>(opts->reduceOp.op_);
  int op = (kind >= 0 && kind < kRedOps) ? self->op_tag[kind] : kNoTag;
  // A snapshot of the list, holding every tensor: psyne's call releases the GIL, and another
  // thread may change the list meanwhile.
  PyObject* tensors = PyList_AsTuple(args[0]);
  if (tensors == nullptr) {
    return nullptr;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(tensors);
  if (op == kNoTag || n == 0 || !all_taken(self, tensors)) {
    Py_DECREF(tensors);
    return call_slow(self, args, nargsf, kwnames);
  }
  PyObject* group = at::globalContext().deterministicAlgorithms() ? self->canonical : self->native;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* item = PyTuple_GET_ITEM(tensors, i);
    const at::Tensor& t = THPVariable_Unpack(item);
    // all_taken checked it: a dense contiguous CPU tensor of one of psyne's dtypes.
    auto tag = static_cast<uint8_t>(self->dtype_tag[static_cast<int>(t.scalar_type())]);
    auto addr = reinterpret_cast<uintptr_t>(t.data_ptr());
    if (api->all_reduce(group, tag, addr, static_cast<size_t>(t.numel()), static_cast<uint8_t>(op)) != 0) {
      Py_DECREF(tensors);
      return nullptr;  // psyne's exception is set
    }
  }
  Py_DECREF(tensors);
  Py_INCREF(self->done);
  return self->done;
}

// The object references a Hot holds, in the order of Hot(...)'s first five arguments: the one
// list that construction, traversal and clearing walk.
std::array<PyObject**, 5> references(Hot* self) {
  return {&self->native, &self->canonical, &self->slow, &self->done, &self->shared};
}

int hot_traverse(PyObject* obj, visitproc visit, void* arg) {
  for (PyObject** field : references(reinterpret_cast<Hot*>(obj))) {
    Py_VISIT(*field);
  }
  return 0;
}

int hot_clear(PyObject* obj) {
  for (PyObject** field : references(reinterpret_cast<Hot*>(obj))) {
    Py_CLEAR(*field);
  }
  return 0;
}

void hot_dealloc(PyObject* obj) {
  PyObject_GC_UnTrack(obj);
  hot_clear(obj);
  Py_TYPE(obj)->tp_free(obj);
}

// Fills `table` (size `limit`, kNoTag where absent) from a dict of small int keys to tags.
bool fill_ops(PyObject* dict, int8_t* table, int limit) {
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    long k = PyLong_AsLong(key), v = PyLong_AsLong(value);
    if (PyErr_Occurred()) {
      return false;
    }
    if (k >= 0 && k < limit && v >= 0 && v < 128) {
      table[k] = static_cast<int8_t>(v);
    }
  }
  return true;
}

// Fills the dtype table from a dict of torch.dtype to psyne's tag.
bool fill_dtypes(PyObject* dict, int8_t* table) {
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    if (!THPDtype_Check(key)) {
      PyErr_SetString(PyExc_TypeError, "psyne torch hot path: a dtype key is not a torch.dtype");
      return false;
    }
    int type = static_cast<int>(reinterpret_cast<THPDtype*>(key)->scalar_type);
    long v = PyLong_AsLong(value);
    if (PyErr_Occurred()) {
      return false;
    }
    if (type >= 0 && type < kScalarTypes && v >= 0 && v < 128) {
      table[type] = static_cast<int8_t>(v);
    }
  }
  return true;
}

PyObject* hot_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* names[] = {"native", "canonical", "slow", "done", "shared", "dtypes", "ops", nullptr};
  PyObject *native, *canonical, *slow, *done, *shared, *dtypes, *ops;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOO!O!O!", const_cast<char**>(names), &native,
                                   &canonical, &slow, &done, &PyDict_Type, &shared, &PyDict_Type,
                                   &dtypes, &PyDict_Type, &ops)) {
    return nullptr;
  }
  Hot* self = reinterpret_cast<Hot*>(type->tp_alloc(type, 0));
  if (self == nullptr) {
    return nullptr;
  }
  self->vectorcall = hot_call;
  std::fill(std::begin(self->dtype_tag), std::end(self->dtype_tag), kNoTag);
  std::fill(std::begin(self->op_tag), std::end(self->op_tag), kNoTag);
  PyObject* values[] = {native, canonical, slow, done, shared};
  auto fields = references(self);
  for (size_t i = 0; i < fields.size(); i++) {
    Py_INCREF(values[i]);
    *fields[i] = values[i];
  }
  if (!fill_dtypes(dtypes, self->dtype_tag) || !fill_ops(ops, self->op_tag, kRedOps)) {
    Py_DECREF(self);
    return nullptr;
  }
  return reinterpret_cast<PyObject*>(self);
}

PyTypeObject HotType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "psyne_torch_hot",
                      "The psyne torch backend's blocking all_reduce in C++.", -1};

bool load_api() {
  auto* table = static_cast<const HotApi*>(PyCapsule_Import("psyne._native._torch_hot_api", 0));
  if (table == nullptr) {
    return false;
  }
  if (table->version != kApiVersion) {
    PyErr_Format(PyExc_ImportError,
                 "psyne torch hot path: psyne._native exports version %u of its table, this "
                 "build expects %u (a stale build: remove the cache psyne._torch_hot names)",
                 table->version, kApiVersion);
    return false;
  }
  api = table;
  return true;
}

}  // namespace

PyMODINIT_FUNC PyInit_psyne_torch_hot() {
  if (!load_api()) {
    return nullptr;
  }
  HotType.tp_name = "psyne_torch_hot.Hot";
  HotType.tp_basicsize = sizeof(Hot);
  HotType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  HotType.tp_doc = "One group's blocking all_reduce: Hot(native, canonical, slow, done, shared, dtypes, ops).";
  HotType.tp_new = hot_new;
  HotType.tp_call = PyVectorcall_Call;
  HotType.tp_vectorcall_offset = offsetof(Hot, vectorcall);
  HotType.tp_traverse = hot_traverse;
  HotType.tp_clear = hot_clear;
  HotType.tp_dealloc = hot_dealloc;
  if (PyType_Ready(&HotType) < 0) {
    return nullptr;
  }
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) {
    return nullptr;
  }
  Py_INCREF(&HotType);
  if (PyModule_AddObject(m, "Hot", reinterpret_cast<PyObject*>(&HotType)) < 0) {
    Py_DECREF(&HotType);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
