// listing: run
// listing: stdout=cv wait interrupted: returned false, queue empty\nrequest_stop: first true, second false; callback ran on the requesting thread\nlate callback ran at registration\nqueue consumer stopped via stop_callback -> close\(\) after 3 items
// C++20 的协作式中断：std::stop_source / std::stop_token / std::stop_callback 与 std::jthread。
// 中断不是强行杀死线程：请求方只是置一个标志并运行已登记的回调，被中断的线程在检查点自己退出。
#include "../os/bounded-queue.hpp"

#include <cassert>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <stop_token>
#include <thread>

// --8<-- [start:cv]
// 1. 可中断的条件变量等待：condition_variable_any::wait(lock, stop_token, pred)
//    在谓词成立或收到停止请求时返回，返回值就是谓词的值。
void interrupt_cv_wait() {
    std::mutex mu;
    std::condition_variable_any cv;
    std::deque<int> q;  // 永远不会有数据
    bool result = true;
    {
        std::jthread consumer([&](std::stop_token st) {
            std::unique_lock<std::mutex> lk(mu);
            result = cv.wait(lk, st, [&] { return !q.empty(); });
        });
    }  // jthread 析构：request_stop() 唤醒等待中的 consumer，然后 join()
    assert(!result && q.empty());
    std::printf("cv wait interrupted: returned false, queue empty\n");
}
// --8<-- [end:cv]

// --8<-- [start:callback]
// 2. stop_callback：request_stop() 在*请求方*线程里同步运行已登记的回调；
//    登记时若已经请求过停止，回调在登记的线程里立即运行。
void callbacks() {
    std::stop_source src;
    std::thread::id ran_on;
    {
        std::stop_callback cb(src.get_token(), [&] { ran_on = std::this_thread::get_id(); });
        std::thread requester([&] {
            bool first = src.request_stop();
            bool second = src.request_stop();  // 只有第一次请求返回 true
            assert(first && !second);
        });
        std::thread::id requester_id = requester.get_id();
        requester.join();
        assert(ran_on == requester_id);
    }
    std::printf("request_stop: first true, second false; callback ran on the requesting thread\n");

    bool late = false;
    std::stop_callback cb2(src.get_token(), [&] { late = true; });  // 已经停止：构造时立即运行
    assert(late);
    std::printf("late callback ran at registration\n");
}
// --8<-- [end:callback]

// --8<-- [start:queue]
// 3. 中断一个不认识 stop_token 的阻塞调用：登记一个回调，让它做“能唤醒那个调用”的事。
//    这里消费者阻塞在有界队列的 pop() 里（见操作系统一章），回调调用 close()，pop() 返回 nullopt。
void interrupt_queue_consumer() {
    BoundedQueue<int> q(4);
    int consumed = 0;
    std::jthread consumer([&](std::stop_token st) {
        std::stop_callback on_stop(st, [&] { q.close(); });
        while (auto item = q.pop()) ++consumed;
    });
    for (int i = 0; i < 3; ++i) q.push(i);
    while (q.size() != 0) std::this_thread::yield();  // 等消费者取走 3 个，再次阻塞在 pop() 里
    consumer.request_stop();
    consumer.join();
    assert(consumed == 3);
    std::printf("queue consumer stopped via stop_callback -> close() after %d items\n", consumed);
}
// --8<-- [end:queue]

int main() {
    interrupt_cv_wait();
    callbacks();
    interrupt_queue_consumer();
    return 0;
}
