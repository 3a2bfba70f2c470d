// Compiled by .ci/c.sh with -std=c++17 -pedantic -Wall -Wextra -Werror (and as C++20): the
// header alone must be clean, and instantiating its templates must be too.
#include "postbox.hpp"

int main() {
    postbox::queue q;
    auto start = [&] {
        return postbox::processor::start(q, [](postbox::processor_message &) {});
    };
    auto start_tx = [&] {
        return postbox::processor::start_transactional(
            q, [](postbox::processor_message &, postbox::tx_ref) {
                return postbox::handler_result::complete;
            });
    };
    (void)start;
    (void)start_tx;
    postbox::bytes_view b("x");
    return b.size() == 1 && !q ? 0 : 1;
}
