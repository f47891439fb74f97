// The Python module mxlinear._C. Importing it registers the torch ops (ops.cpp, by static
// initializers); the module itself carries the library's version and the selection report.
// It uses only Python's limited API, like the ops use only torch's stable ABI.
#include <Python.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "environment.hpp"
#include "mxlinear/mxlinear.hpp"

namespace {

// A new reference that is released on scope exit unless released to the caller.
class Ref {
 public:
  explicit Ref(PyObject* p) : p_(p) {}
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  ~Ref() { Py_XDECREF(p_); }
  PyObject* get() const { return p_; }
  PyObject* release() { return std::exchange(p_, nullptr); }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  PyObject* p_;
};

PyObject* str(const std::string& s) {
  return PyUnicode_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
}

// d[key] = value, stealing value; false (with a Python error set) on failure.
bool set(PyObject* d, const char* key, PyObject* value) {
  const Ref owned(value);
  return value != nullptr && PyDict_SetItemString(d, key, value) == 0;
}

bool append(PyObject* list, PyObject* value) {
  const Ref owned(value);
  return value != nullptr && PyList_Append(list, value) == 0;
}

PyObject* dispatch_dict(const mxlinear::Dispatch& d) {
  Ref out(PyDict_New());
  if (!out || !set(out.get(), "kernel", str(std::string(mxlinear::kernel_name(d.kernel)))) ||
      !set(out.get(), "config", str(d.config)) || !set(out.get(), "why", str(d.why)))
    return nullptr;
  return out.release();
}

PyObject* row_dict(const mxlinear::ReportRow& row) {
  Ref out(PyDict_New());
  if (!out) return nullptr;
  const auto& sel = row.selection;
  Ref rejected(PyList_New(0));
  Ref warnings(PyList_New(0));
  Ref per_m(PyDict_New());
  Ref run(PyList_New(0));
  if (!rejected || !warnings || !per_m || !run) return nullptr;
  for (const auto& r : sel.rejected)
    if (!append(rejected.get(), Py_BuildValue("(NN)", str(r.kernel), str(r.reason))))
      return nullptr;
  for (const auto& w : sel.warnings)
    if (!append(warnings.get(), str(w))) return nullptr;
  for (const auto& [m, dispatch] : row.per_m) {
    const Ref key(PyLong_FromLongLong(m));
    const Ref value(dispatch_dict(dispatch));
    if (!key || !value || PyDict_SetItem(per_m.get(), key.get(), value.get()) != 0) return nullptr;
  }
  for (const auto& name : mxlinear::kernels_run(row))
    if (!append(run.get(), str(name))) return nullptr;
  const std::string kernel(mxlinear::kernel_name(sel.kernel));
  if (!set(out.get(), "n", PyLong_FromLongLong(row.layer.n)) ||
      !set(out.get(), "k", PyLong_FromLongLong(row.layer.k)) ||
      !set(out.get(), "kernel", kernel.empty() ? Py_NewRef(Py_None) : str(kernel)) ||
      !set(out.get(), "rejected", rejected.release()) ||
      !set(out.get(), "warnings", warnings.release()) ||
      !set(out.get(), "dispatch", per_m.release()) || !set(out.get(), "kernels_run", run.release()))
    return nullptr;
  return out.release();
}

bool parse_dtype(const char* name, mxlinear::DType* out) {
  const std::string s(name);
  if (s == "bfloat16")
    *out = mxlinear::DType::kBF16;
  else if (s == "float16")
    *out = mxlinear::DType::kF16;
  else if (s == "float32")
    *out = mxlinear::DType::kF32;
  else
    return false;
  return true;
}

// _select(n, k, device, out_dtype, activation, x_dtype, batch_invariant, ms) -> dict; device
// None: the current CUDA device (or the CPU). mxlinear.select resolves the process defaults and
// checks ms (None for the report's default counts, else a tuple of counts in any order).
PyObject* select(PyObject*, PyObject* args) {
  long long n = 0, k = 0;
  const char* device_spec = nullptr;
  const char* out_dtype_name = nullptr;
  const char* activation_name = nullptr;
  const char* x_dtype_name = nullptr;
  int batch_invariant = 0;
  PyObject* ms_arg = nullptr;
  if (!PyArg_ParseTuple(args, "LLzssspO", &n, &k, &device_spec, &out_dtype_name, &activation_name,
                        &x_dtype_name, &batch_invariant, &ms_arg))
    return nullptr;
  mxlinear::DType out_dtype{}, x_dtype{};
  if (!parse_dtype(out_dtype_name, &out_dtype)) {
    PyErr_Format(PyExc_ValueError,
                 "mxlinear.select: argument 'out_dtype' is '%s'; expected bfloat16, float16 or "
                 "float32",
                 out_dtype_name);
    return nullptr;
  }
  if (n < 1 || k < 1) {
    PyErr_Format(PyExc_ValueError,
                 "mxlinear.select: arguments 'n' and 'k' are %lld and %lld; expected both >= 1", n,
                 k);
    return nullptr;
  }
  const auto mode = mxlinear::parse_activation_mode(activation_name);
  if (!mode) {
    PyErr_Format(PyExc_ValueError,
                 "mxlinear.select: argument 'activation' is '%s'; expected 'mx' or 'bf16'",
                 activation_name);
    return nullptr;
  }
  const auto operand = parse_dtype(x_dtype_name, &x_dtype)
                           ? mxlinear::activation_operand(*mode, x_dtype)
                           : std::nullopt;
  if (!operand) {
    PyErr_Format(PyExc_ValueError,
                 "mxlinear.select: argument 'x_dtype' is '%s' with activation '%s'; expected "
                 "bfloat16 or float16 (or float32 with 'mx')",
                 x_dtype_name, activation_name);
    return nullptr;
  }
  // None: the report's default counts.
  std::vector<std::int64_t> ms(mxlinear::kReportTokenCounts.begin(),
                               mxlinear::kReportTokenCounts.end());
  if (ms_arg != Py_None) {
    if (!PyTuple_Check(ms_arg)) {
      PyErr_SetString(PyExc_TypeError, "mxlinear.select: argument 'ms' is not a tuple");
      return nullptr;
    }
    ms.clear();
    for (Py_ssize_t i = 0; i < PyTuple_Size(ms_arg); ++i) {
      const long long m = PyLong_AsLongLong(PyTuple_GetItem(ms_arg, i));
      if (m == -1 && PyErr_Occurred()) return nullptr;
      ms.push_back(m);
    }
    ms = mxlinear::report_token_counts(ms);
  }
  try {
    const auto device = device_spec == nullptr ? mxlinear::DeviceDescription::current()
                                               : mxlinear::DeviceDescription::parse(device_spec);
    const std::vector<mxlinear::ModelLayer> layers{{"layer", n, k, 1}};
    const auto rows =
        mxlinear::selection_report(layers, device, out_dtype, *operand, batch_invariant != 0, ms);
    Ref out(row_dict(rows.front()));
    if (!out || !set(out.get(), "device", str(device.to_string())) ||
        !set(out.get(), "activation", str(activation_name)) ||
        !set(out.get(), "batch_invariant", PyBool_FromLong(batch_invariant)) ||
        !set(out.get(), "report", str(mxlinear::format_report(rows, device))))
      return nullptr;
    return out.release();
  } catch (const mxlinear::Error& e) {
    PyErr_Format(
        e.code() == mxlinear::ErrorCode::kInvalidArgument ? PyExc_ValueError : PyExc_RuntimeError,
        "mxlinear.select: %s", e.what());
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "mxlinear.select: %s", e.what());
    return nullptr;
  }
}

// _default_activation() -> "mx" or "bf16": the mode MXLINEAR_ACTIVATION makes the default, as the
// library read it (once per process).
PyObject* default_activation(PyObject*, PyObject*) {
  try {
    return str(
        std::string(mxlinear::activation_mode_name(mxlinear_torch::default_activation_mode())));
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "mxlinear.default_activation: %s", e.what());
    return nullptr;
  }
}

// _default_batch_invariant() -> bool: whether MXLINEAR_BATCH_INVARIANT makes the batch-invariant
// mode the default, as the library read it (once per process).
PyObject* default_batch_invariant(PyObject*, PyObject*) {
  try {
    return PyBool_FromLong(mxlinear_torch::default_batch_invariant() ? 1 : 0);
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "mxlinear.default_batch_invariant: %s", e.what());
    return nullptr;
  }
}

PyMethodDef methods[] = {
    {"_select", select, METH_VARARGS,
     "_select(n, k, device, out_dtype, activation, x_dtype, batch_invariant, ms) -> dict: the "
     "selection report of one layer."},
    {"_default_activation", default_activation, METH_NOARGS,
     "_default_activation() -> 'mx' or 'bf16': MXLINEAR_ACTIVATION's mode, read once."},
    {"_default_batch_invariant", default_batch_invariant, METH_NOARGS,
     "_default_batch_invariant() -> bool: MXLINEAR_BATCH_INVARIANT's switch, read once."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__C() {
  PyObject* module = PyModule_Create(&module_def);
  if (module == nullptr) return nullptr;
  const std::string version(mxlinear::version());
  if (PyModule_AddStringConstant(module, "__version__", version.c_str()) != 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
