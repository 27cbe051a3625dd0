import CourierPool
import Testing

@Suite("PoolActions: order kept, two inline, the rest in an array")
struct PoolActionsTests {
    /// Five distinct actions, in the order they are added.
    let five: [Action] = [
        .createConnection(C(0)), .executeRequest(R(1), on: C(0)), .cancelIdleTimer(C(2)),
        .closeConnection(C(3)), .shutdownComplete,
    ]

    @Test("appended one by one, every length from 0 to 5 reads back in order, with its count", arguments: 0...5)
    func appendKeepsOrder(_ length: Int) {
        var actions = Machine.Actions()
        for action in five.prefix(length) { actions.append(action) }
        #expect(Array(actions) == Array(five.prefix(length)))
        #expect(actions.count == length)
        #expect(actions.isEmpty == (length == 0))
        #expect(actions == Machine.Actions(five.prefix(length)))
    }

    @Test("prepend puts an action first across the inline and array parts", arguments: 0...4)
    func prependPutsFirst(_ length: Int) {
        var actions = Machine.Actions(five.dropFirst().prefix(length))
        actions.prepend(five[0])
        #expect(Array(actions) == Array(five.prefix(length + 1)))
    }

    @Test("+ and += join in order; an empty side changes nothing")
    func joining() {
        let front: Machine.Actions = [five[0], five[1], five[2]]
        let back: Machine.Actions = [five[3], five[4]]
        #expect(Array(front + back) == five)
        #expect(front + [] == front)
        #expect([] + back == back)
        var joined: Machine.Actions = [five[0]]
        joined += [five[1], five[2], five[3]]
        joined += [five[4]]
        #expect(Array(joined) == five)
    }

    @Test("equality is by the actions in order")
    func equality() {
        #expect(Machine.Actions([five[0], five[1]]) != Machine.Actions([five[1], five[0]]))
        #expect(Machine.Actions([five[0]]) != Machine.Actions([five[0], five[0]]))
        #expect(Machine.Actions(five) == Machine.Actions(five))
    }
}
