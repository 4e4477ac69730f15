#include "runtime/FlagosDeviceAllocator.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>
#include <flagos_hostrt.h>

#include "runtime/DeviceRuntime.h"
#include "runtime/MemoryHistory.h"

namespace torch_fl {

namespace {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::StatType;

constexpr size_t kSmallSize = 1 << 20;    // requests up to 1 MiB round to 512 B
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = 2 << 20;   // larger ones round to 2 MiB

size_t round_size(size_t n) {
  const size_t unit = n <= kSmallSize ? kSmallRound : kLargeRound;
  return (n + unit - 1) / unit * unit;
}

StatType pool_of(size_t n) { return n <= kSmallSize ? StatType::SMALL_POOL : StatType::LARGE_POOL; }

// Adds or removes `amount` in the aggregate and in the pool of a block of `block_size`.
void update(c10::CachingAllocator::StatArray& stats, size_t amount, bool increase, size_t block_size) {
  for (auto type : {StatType::AGGREGATE, pool_of(block_size)}) {
    auto& stat = stats[static_cast<size_t>(type)];
    increase ? stat.increase(amount) : stat.decrease(amount);
  }
}

// One block the runtime handed out: this allocator never splits or merges them.  Its record lives from the
// runtime's malloc to its free, handed out and cached again in between, so that a warm workload's allocations
// and frees make no allocation of their own.
struct Block {
  void* ptr;
  c10::DeviceIndex device;
  size_t size;                 // rounded size, what the runtime holds
  size_t requested = 0;        // what the caller asked for, while handed out
  bool live = false;           // handed out
  std::shared_ptr<c10::GatheredContext> context;  // its allocation's stack, while memory history is on
};

using memory_history::Action;
using FreeBlocks = std::multimap<size_t, Block*>;  // rounded size -> cached block

struct DeviceCache {
  std::mutex mutex;
  FreeBlocks free_blocks;
  // The tree nodes of blocks handed out, kept for their next return to free_blocks (a node allocated and freed
  // per allocation was most of this allocator's own cost).
  std::vector<FreeBlocks::node_type> spare_nodes;
  DeviceStats stats;
  // set_per_process_memory_fraction: the share of the device's memory the reserved blocks may reach.
  double memory_fraction = 1.0;

  // Gives every cached block back to the runtime.  Called with `mutex` held.
  void release_cached();
};

std::mutex blocks_mutex;
// Every block by its address: the deleter (a plain function pointer, given the address) finds its record here.
// Changed only when the runtime allocates or frees a block; taken after a cache's mutex where both are held.
std::unordered_map<void*, std::unique_ptr<Block>>& blocks() {
  static auto* map = new std::unordered_map<void*, std::unique_ptr<Block>>();
  return *map;
}

void DeviceCache::release_cached() {
  std::lock_guard<std::mutex> blocks_lock(blocks_mutex);
  for (auto& [size, block] : free_blocks) {
    memory_history::record(block->device, Action::SEGMENT_FREE, reinterpret_cast<size_t>(block->ptr), size, nullptr);
    runtime::free_device(block->ptr);
    blocks().erase(block->ptr);
    update(stats.reserved_bytes, size, false, size);
    update(stats.segment, 1, false, size);
  }
  free_blocks.clear();
  spare_nodes.clear();
}

std::array<DeviceCache, HOSTRT_MAX_DEVICES>& caches() {
  static auto* all = new std::array<DeviceCache, HOSTRT_MAX_DEVICES>();  // outlives tensors freed at exit
  return *all;
}

DeviceCache& cache_of(c10::DeviceIndex device) {
  runtime::check_device_index(device);
  return caches()[device];
}

void free_block(void* ptr);

// torch.profiler's memory timeline (profile_memory=True): every allocation and free, with the device's
// totals after it, as PyTorch's own allocators report theirs.  Callers pass totals read under the lock.
void report_to_profiler(void* ptr, int64_t bytes, const DeviceStats& stats, c10::DeviceIndex device) {
  if (!c10::memoryProfilingEnabled()) return;
  const auto agg = static_cast<size_t>(StatType::AGGREGATE);
  c10::reportMemoryUsageToProfiler(ptr, bytes, static_cast<size_t>(stats.allocated_bytes[agg].current),
                                   static_cast<size_t>(stats.reserved_bytes[agg].current),
                                   c10::Device(c10::DeviceType::PrivateUse1, device));
}

std::string format_bytes(size_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(n);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.2f %s", value, units[unit]);
  return text;
}

void free_block(void* ptr) {
  if (ptr == nullptr) return;
  Block* block;
  {
    std::lock_guard<std::mutex> lock(blocks_mutex);
    auto it = blocks().find(ptr);
    TORCH_INTERNAL_ASSERT(it != blocks().end(), "flagos allocator: freeing an unknown pointer");
    block = it->second.get();  // handed out, so no other thread gives it back to the runtime meanwhile
  }
  const c10::DeviceIndex device = block->device;
  const size_t size = block->size;
  auto context = memory_history::context_for(Action::FREE_REQUESTED);
  auto& cache = caches()[device];
  std::lock_guard<std::mutex> lock(cache.mutex);
  TORCH_INTERNAL_ASSERT(block->live, "flagos allocator: freeing a block twice");
  block->live = false;
  // The host runtime's streams complete in order before a free returns: the block is free at once.
  const auto addr = reinterpret_cast<size_t>(ptr);
  memory_history::record(device, Action::FREE_REQUESTED, addr, size, context);
  memory_history::record(device, Action::FREE_COMPLETED, addr, size, std::move(context));
  block->context.reset();
  update(cache.stats.allocated_bytes, size, false, size);
  update(cache.stats.requested_bytes, block->requested, false, size);
  update(cache.stats.active_bytes, size, false, size);
  update(cache.stats.allocation, 1, false, size);
  update(cache.stats.active, 1, false, size);
  if (cache.spare_nodes.empty()) {
    cache.free_blocks.emplace(size, block);
  } else {
    FreeBlocks::node_type node = std::move(cache.spare_nodes.back());
    cache.spare_nodes.pop_back();
    node.key() = size;
    node.mapped() = block;
    cache.free_blocks.insert(std::move(node));
  }
  report_to_profiler(ptr, -static_cast<int64_t>(size), cache.stats, device);
}

// A new block of `size` bytes from the runtime for `cache` (its mutex held), within the device's memory
// fraction; frees the cache and retries once before it raises OutOfMemoryError.  `context`: the request's
// stack for the memory history (gathered before the lock).
Block* new_segment(DeviceCache& cache, c10::DeviceIndex device, size_t size,
                   const std::shared_ptr<c10::GatheredContext>& context) {
  const auto agg = static_cast<size_t>(StatType::AGGREGATE);
  // The device's capacity is asked only under a fraction: an allocation makes no other runtime call.
  const bool limited = cache.memory_fraction < 1.0;
  const size_t allowed = limited ? static_cast<size_t>(cache.memory_fraction *
                                                       static_cast<double>(runtime::memory_info(device).second))
                                 : SIZE_MAX;
  auto within_fraction = [&] {
    return !limited || static_cast<size_t>(cache.stats.reserved_bytes[agg].current) + size <= allowed;
  };
  auto try_malloc = [&]() -> void* {
    if (!within_fraction()) return nullptr;
    const auto previous = runtime::current_device();
    if (previous != device) runtime::set_device(device);
    void* ptr = runtime::malloc_device(size);
    if (previous != device) runtime::set_device(previous);
    return ptr;
  };
  void* ptr = try_malloc();
  if (ptr == nullptr && !cache.free_blocks.empty()) {
    cache.stats.num_alloc_retries += 1;
    cache.release_cached();
    ptr = try_malloc();
  }
  if (ptr == nullptr) {
    cache.stats.num_ooms += 1;
    const auto [free_bytes, total_bytes] = runtime::memory_info(device);
    memory_history::record(device, Action::OOM, free_bytes, size, context);
    std::string limit = "free tensors or raise FLAGOS_HOST_MEMORY_LIMIT";
    if (!within_fraction()) {
      char fraction[32];
      std::snprintf(fraction, sizeof(fraction), "%g", cache.memory_fraction);
      limit = "this process may reserve " + format_bytes(allowed) + " of it (set_per_process_memory_fraction(" +
              fraction + ")); free tensors or raise the fraction";
    }
    TORCH_CHECK_WITH(OutOfMemoryError, false, "flagos:", static_cast<int>(device),
                     " out of memory: tried to allocate ", format_bytes(size), " (device capacity ",
                     format_bytes(total_bytes), ", ", format_bytes(free_bytes), " free, ",
                     format_bytes(cache.stats.allocated_bytes[agg].current), " allocated by tensors, ",
                     format_bytes(cache.stats.reserved_bytes[agg].current), " reserved); ", limit);
  }
  update(cache.stats.reserved_bytes, size, true, size);
  update(cache.stats.segment, 1, true, size);
  std::lock_guard<std::mutex> blocks_lock(blocks_mutex);
  auto& block = blocks()[ptr];
  block = std::make_unique<Block>(Block{ptr, device, size});
  return block.get();
}

}  // namespace

c10::DataPtr FlagosDeviceAllocator::allocate(size_t nbytes) {
  return allocate_on(runtime::current_device(), nbytes);
}

c10::DataPtr FlagosDeviceAllocator::allocate_on(c10::DeviceIndex device, size_t nbytes) {
  const c10::Device where(c10::DeviceType::PrivateUse1, device);
  if (nbytes == 0) return c10::DataPtr(nullptr, where);
  auto& cache = cache_of(device);
  const size_t size = round_size(nbytes);
  auto context = memory_history::context_for(Action::ALLOC);
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    // Reuse a cached block unless it would waste more than the request itself.
    auto it = cache.free_blocks.lower_bound(size);
    Block* block;
    if (it != cache.free_blocks.end() && it->first < 2 * size) {
      block = it->second;
      cache.spare_nodes.push_back(cache.free_blocks.extract(it));
    } else {
      block = new_segment(cache, device, size, context);
      memory_history::record(device, Action::SEGMENT_ALLOC, reinterpret_cast<size_t>(block->ptr), size, context);
    }
    ptr = block->ptr;
    const size_t block_size = block->size;
    block->live = true;
    block->requested = nbytes;
    block->context = context;
    memory_history::record(device, Action::ALLOC, reinterpret_cast<size_t>(ptr), block_size, std::move(context));
    update(cache.stats.allocated_bytes, block_size, true, block_size);
    update(cache.stats.requested_bytes, nbytes, true, block_size);
    update(cache.stats.active_bytes, block_size, true, block_size);
    update(cache.stats.allocation, 1, true, block_size);
    update(cache.stats.active, 1, true, block_size);
    report_to_profiler(ptr, static_cast<int64_t>(block_size), cache.stats, device);
  }
  return c10::DataPtr(ptr, ptr, &free_block, where);
}

c10::DeleterFnPtr FlagosDeviceAllocator::raw_deleter() const { return &free_block; }

void FlagosDeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  runtime::copy(dest, src, count, runtime::CopyKind::DeviceToDevice, nullptr);
}

void FlagosDeviceAllocator::emptyCache(c10::MempoolId_t /*mempool_id*/) {
  const auto count = runtime::device_count();
  for (c10::DeviceIndex device = 0; device < count; ++device) {
    auto& cache = caches()[device];
    std::lock_guard<std::mutex> lock(cache.mutex);
    cache.release_cached();
  }
}

void FlagosDeviceAllocator::recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) {}

DeviceStats FlagosDeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  auto& cache = cache_of(device);
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.stats;
}

namespace {
template <typename Reset>
void reset_each_stat(DeviceStats& s, Reset reset) {
  for (auto* array : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                      &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes}) {
    for (auto& stat : *array) reset(stat);
  }
}
}  // namespace

void FlagosDeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  auto& cache = cache_of(device);
  std::lock_guard<std::mutex> lock(cache.mutex);
  reset_each_stat(cache.stats, [](c10::CachingAllocator::Stat& stat) { stat.reset_accumulated(); });
  cache.stats.num_alloc_retries = 0;
  cache.stats.num_ooms = 0;
}

void FlagosDeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  auto& cache = cache_of(device);
  std::lock_guard<std::mutex> lock(cache.mutex);
  reset_each_stat(cache.stats, [](c10::CachingAllocator::Stat& stat) { stat.reset_peak(); });
}

std::pair<size_t, size_t> FlagosDeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  return runtime::memory_info(device);
}

void FlagosDeviceAllocator::set_memory_fraction(double fraction, c10::DeviceIndex device) {
  TORCH_CHECK(fraction >= 0.0 && fraction <= 1.0, "invalid memory fraction ", fraction,
              ": give a share of the device's memory between 0 and 1");
  auto& cache = cache_of(device);
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.memory_fraction = fraction;
}

double FlagosDeviceAllocator::memory_fraction(c10::DeviceIndex device) {
  auto& cache = cache_of(device);
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.memory_fraction;
}

std::vector<c10::CachingDeviceAllocator::SegmentInfo> FlagosDeviceAllocator::snapshot_segments() {
  // Every block the runtime handed out is a segment of its own (this allocator never splits one).
  std::vector<c10::CachingDeviceAllocator::SegmentInfo> segments;
  const auto count = runtime::device_count();
  for (c10::DeviceIndex device = 0; device < count; ++device) {
    auto& cache = caches()[device];
    std::lock_guard<std::mutex> lock(cache.mutex);
    std::lock_guard<std::mutex> blocks_lock(blocks_mutex);
    for (const auto& [ptr, record] : blocks()) {
      if (record->device != device) continue;
      auto& segment = segments.emplace_back();
      segment.device = device;
      segment.address = reinterpret_cast<size_t>(ptr);
      segment.total_size = record->size;
      segment.requested_size = record->live ? record->requested : 0;
      segment.allocated_size = record->live ? record->size : 0;
      segment.active_size = segment.allocated_size;
      segment.is_large = record->size > kSmallSize;
      auto& block = segment.blocks.emplace_back();
      block.size = record->size;
      block.requested_size = segment.requested_size;
      block.allocated = block.active = record->live;
      block.context_when_allocated = record->context;
      segment.context_when_allocated = block.context_when_allocated;
    }
  }
  return segments;
}

FlagosDeviceAllocator& device_allocator() {
  static FlagosDeviceAllocator allocator;
  return allocator;
}

}  // namespace torch_fl
