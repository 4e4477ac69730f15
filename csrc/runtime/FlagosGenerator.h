// Per-device random number generators.
//
// A flagos generator carries the device (so torch.Generator("flagos"),
// get_rng_state and manual_seed address it) and owns an engine: a generator of
// the runtime's kernel device type (a CPU generator on the host platform, a
// CUDA generator on the cuda platform), because PyTorch's kernels accept only
// generators of their own device type; the boxing layer hands them engine().
#pragma once

#include <ATen/core/Generator.h>

namespace torch_fl {

class FlagosGenerator final : public c10::GeneratorImpl {
 public:
  FlagosGenerator(c10::DeviceIndex device, at::Generator engine);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The kernel device's generator that kernels draw from on behalf of this one.
  at::Generator engine() const { return engine_; }

 private:
  FlagosGenerator* clone_impl() const override;
  at::Generator engine_;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

}  // namespace torch_fl
