// tst_abortable_barrier: the communicators' barrier (util/abortable_barrier.hpp), on the host:
//   - 3 threads meet 100,000 times, every meeting whole (no thread leaves a round before all came);
//   - abandoned while two wait: both are released with false, and so is every later arrival.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "plain_check.hpp"
#include "util/abortable_barrier.hpp"

namespace {

void everyMeetingWhole() {
    constexpr int kThreads = 3, kRounds = 100000;
    tb::AbortableBarrier b(kThreads);
    std::atomic<int> came{0};
    std::atomic<int> torn{0}, refused{0};
    std::vector<std::thread> threads;
    for (int k = 0; k < kThreads; ++k)
        threads.emplace_back([&] {
            for (int i = 0; i < kRounds; ++i) {
                came.fetch_add(1);
                if (!b.arriveAndWait()) ++refused;
                // Everyone of round i has come before anyone leaves it.
                if (came.load() < (i + 1) * kThreads) ++torn;
                if (!b.arriveAndWait()) ++refused;  // (so no one runs into round i + 1's count early)
            }
        });
    for (auto& t : threads) t.join();
    CHECK(torn == 0 && refused == 0, "%d meetings left early, %d refused", torn.load(), refused.load());
}

void abandonedReleasesEveryone() {
    tb::AbortableBarrier b(3);
    std::atomic<int> released{0}, met{0};
    std::vector<std::thread> waiting;
    for (int k = 0; k < 2; ++k)
        waiting.emplace_back([&] {
            met += b.arriveAndWait() ? 1 : 0;
            ++released;
        });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(released == 0, "%d threads left a barrier that one thread had not reached", released.load());
    b.abandon();
    for (auto& t : waiting) t.join();
    CHECK(released == 2 && met == 0, "abandoned: %d released, %d told they met", released.load(), met.load());
    CHECK(!b.arriveAndWait(), "a later arrival at an abandoned barrier must be refused");
}

}  // namespace

int main() {
    everyMeetingWhole();
    abandonedReleasesEveryone();
    return tbcheck::exitStatus();
}
