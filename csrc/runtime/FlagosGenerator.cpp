#include "runtime/FlagosGenerator.h"

#include <deque>
#include <mutex>

#include "runtime/DeviceRuntime.h"

namespace torch_fl {

FlagosGenerator::FlagosGenerator(c10::DeviceIndex device, at::Generator engine)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      engine_(std::move(engine)) {}

// The engine's own mutex guards its state: kernels lock it while drawing, and
// the Python accessors of this generator lock it here.
#define FLAGOS_WITH_ENGINE(body)                             \
  auto* engine = engine_.unsafeGetGeneratorImpl();          \
  std::lock_guard<std::mutex> engine_lock(engine->mutex_); \
  body

void FlagosGenerator::set_current_seed(uint64_t seed) { FLAGOS_WITH_ENGINE(engine->set_current_seed(seed);) }
void FlagosGenerator::set_offset(uint64_t offset) { FLAGOS_WITH_ENGINE(engine->set_offset(offset);) }
uint64_t FlagosGenerator::get_offset() const { FLAGOS_WITH_ENGINE(return engine->get_offset();) }
uint64_t FlagosGenerator::current_seed() const { FLAGOS_WITH_ENGINE(return engine->current_seed();) }
uint64_t FlagosGenerator::seed() { FLAGOS_WITH_ENGINE(return engine->seed();) }
void FlagosGenerator::set_state(const c10::TensorImpl& new_state) { FLAGOS_WITH_ENGINE(engine->set_state(new_state);) }
c10::intrusive_ptr<c10::TensorImpl> FlagosGenerator::get_state() const {
  FLAGOS_WITH_ENGINE(return engine->get_state();)
}

#undef FLAGOS_WITH_ENGINE

FlagosGenerator* FlagosGenerator::clone_impl() const {
  auto* copy = new FlagosGenerator(device().index(), runtime::create_generator_engine(device().index()));
  auto state = get_state();
  copy->set_state(*state);
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::once_flag created;
  static std::deque<at::Generator> generators;  // deque: references stay valid
  std::call_once(created, [] {
    for (c10::DeviceIndex i = 0; i < runtime::device_count(); ++i) {
      generators.emplace_back(at::make_generator<FlagosGenerator>(i, runtime::default_generator_engine(i)));
    }
  });
  if (device < 0) device = runtime::current_device();
  runtime::check_device_index(device);
  return generators[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  if (device < 0) device = runtime::current_device();
  runtime::check_device_index(device);
  return at::make_generator<FlagosGenerator>(device, runtime::create_generator_engine(device));
}

}  // namespace torch_fl
