// leafspine.cc -- ns-3 (3.37) reference model of gradwire's leaf-spine scenarios.
//
// Builds the same leaf-spine fabric as gradwire's `topology.kind = "leaf_spine"`, runs
// either the `incast` or the `ps` (parameter-server push/pull) workload with TCP NewReno
// or DCTCP, and writes one CSV row per flow:
//
//   flow_id,src,dst,size_bytes,start_ns,finish_ns,fct_ns,retransmits,timeouts
//
// gradwire sends without a handshake, so by default (--handshake=preconnect) every TCP
// connection is opened at t = 0 and all flows start --preconnectUs later; the CSV's times
// are shifted back by that allowance. `start_ns` is when the flow's data is handed to its
// socket (a pull: the moment its server holds every push), `finish_ns` when the receiving
// application has read the flow's last byte. Switch ports are byte-limited drop-tail FIFOs
// with step ECN marking (StepEcnQueueDisc), host NICs serve their flows round-robin
// (RoundRobinQueueDisc), as gradwire's do. See docs/validation.md for the full parameter
// mapping and the places where ns-3 cannot match gradwire exactly.
//
// Build: validation/ns3/build.sh      Run: build/leafspine --help

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <unordered_map>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

NS_LOG_COMPONENT_DEFINE("GradwireLeafSpine");

// ---------------------------------------------------------------------------------------
// Switch egress queue: byte-limited drop-tail FIFO with optional step ECN marking.
//
// gradwire marks an ECT packet CE when the port already holds at least K packets (not
// counting the one being serialized): instantaneous, no averaging, no probabilistic region.
// That is DCTCP's recommended switch configuration; ns-3's RED can only approximate it
// (MinTh = MaxTh, QW = 1, thresholds in bytes), so we model it directly. `--aqm=red`
// selects the RED approximation instead.
//
// In ns-3 a port's packets wait in two places: this queue disc and the NetDevice's
// transmit queue (1 packet here). Both count toward the buffer and the ECN threshold, so
// the port behaves like gradwire's single egress queue.
// ---------------------------------------------------------------------------------------
/// LEAFSPINE_TRACE_DROPS=1: `DROP <t ns> <flow> Data|Ack <seq> node<a>->node<b>` for every
/// switch drop, as gradwire prints them with `--features trace` (times from the workload's
/// start, sequence numbers from the flow's first byte).
static bool g_traceDrops = false;
static void TraceDrop(Ptr<QueueDiscItem> item, uint32_t from, uint32_t to);

namespace ns3
{
class StepEcnQueueDisc : public QueueDisc
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid =
            TypeId("ns3::StepEcnQueueDisc")
                .SetParent<QueueDisc>()
                .SetGroupName("TrafficControl")
                .AddConstructor<StepEcnQueueDisc>()
                .AddAttribute("MaxSize",
                              "Buffer size of this egress port",
                              QueueSizeValue(QueueSize("512000B")),
                              MakeQueueSizeAccessor(&QueueDisc::SetMaxSize, &QueueDisc::GetMaxSize),
                              MakeQueueSizeChecker())
                .AddAttribute("MarkThreshold",
                              "Mark CE when at least this many packets are queued (0 = never)",
                              UintegerValue(0),
                              MakeUintegerAccessor(&StepEcnQueueDisc::m_k),
                              MakeUintegerChecker<uint32_t>());
        return tid;
    }

    StepEcnQueueDisc()
        : QueueDisc(QueueDiscSizePolicy::SINGLE_INTERNAL_QUEUE, QueueSizeUnit::BYTES)
    {
    }

  private:
  public:
    /// The device transmit queue behind this queue disc (set after installation).
    void SetDeviceQueue(Ptr<Queue<Packet>> q)
    {
        m_devQueue = q;
    }

    /// The port's ends (node ids), for LEAFSPINE_TRACE_DROPS.
    void SetEnds(uint32_t from, uint32_t to)
    {
        m_from = from;
        m_to = to;
    }

  private:
    bool DoEnqueue(Ptr<QueueDiscItem> item) override
    {
        uint64_t heldPkts = GetInternalQueue(0)->GetNPackets();
        uint64_t heldBytes = GetInternalQueue(0)->GetNBytes();
        if (m_devQueue)
        {
            // device-queue packets carry a 2-byte PPP header the queue disc never sees
            heldPkts += m_devQueue->GetNPackets();
            heldBytes += m_devQueue->GetNBytes() - 2 * m_devQueue->GetNPackets();
        }
        if (heldBytes + item->GetSize() > GetMaxSize().GetValue())
        {
            if (g_traceDrops)
            {
                TraceDrop(item, m_from, m_to);
            }
            DropBeforeEnqueue(item, "buffer full");
            return false;
        }
        if (m_k > 0 && heldPkts >= m_k && Mark(item, "step threshold") &&
            item->GetSize() < 100)
        {
            m_ackMarks++; // a marked pure ACK (Mark() is a no-op for non-ECT packets)
        }
        bool ok = GetInternalQueue(0)->Enqueue(item);
        m_peakBytes = std::max(m_peakBytes, GetInternalQueue(0)->GetNBytes());
        return ok;
    }

    Ptr<QueueDiscItem> DoDequeue() override
    {
        return GetInternalQueue(0)->Dequeue();
    }

    Ptr<const QueueDiscItem> DoPeek() override
    {
        return GetInternalQueue(0)->Peek();
    }

    bool CheckConfig() override
    {
        if (GetNInternalQueues() == 0)
        {
            // DoEnqueue enforces the byte budget before the internal queue sees a packet.
            AddInternalQueue(CreateObjectWithAttributes<DropTailQueue<QueueDiscItem>>(
                "MaxSize",
                QueueSizeValue(GetMaxSize())));
        }
        return GetNInternalQueues() == 1;
    }

    void InitializeParams() override
    {
    }

    uint32_t m_k{0};
    Ptr<Queue<Packet>> m_devQueue;
    uint32_t m_from{0};
    uint32_t m_to{0};

  public:
    uint32_t m_peakBytes{0};
    uint64_t m_ackMarks{0};
};

NS_OBJECT_ENSURE_REGISTERED(StepEcnQueueDisc);

// ---------------------------------------------------------------------------------------
// Host NIC: per-flow queues served round-robin, one packet per turn, unbounded.
//
// gradwire's host NIC asks its ready endpoints (senders and receivers alike) for one packet
// each in turn whenever the link is free, so concurrent flows leave a host interleaved
// packet by packet rather than window by window. Here each TCP connection direction is a
// flow (5-tuple hash); a flow joins the back of the round when it becomes backlogged.
// ---------------------------------------------------------------------------------------
class RoundRobinQueueDisc : public QueueDisc
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("ns3::RoundRobinQueueDisc")
                                .SetParent<QueueDisc>()
                                .SetGroupName("TrafficControl")
                                .AddConstructor<RoundRobinQueueDisc>();
        return tid;
    }

    RoundRobinQueueDisc()
        : QueueDisc(QueueDiscSizePolicy::NO_LIMITS)
    {
    }

  private:
    bool DoEnqueue(Ptr<QueueDiscItem> item) override
    {
        uint32_t key = item->Hash(0);
        std::deque<Ptr<QueueDiscItem>>& q = m_flows[key];
        if (q.empty())
        {
            m_round.push_back(key);
        }
        q.push_back(item);
        return true;
    }

    Ptr<QueueDiscItem> DoDequeue() override
    {
        if (m_round.empty())
        {
            return nullptr;
        }
        uint32_t key = m_round.front();
        m_round.pop_front();
        std::deque<Ptr<QueueDiscItem>>& q = m_flows[key];
        Ptr<QueueDiscItem> item = q.front();
        q.pop_front();
        if (q.empty())
        {
            m_flows.erase(key);
        }
        else
        {
            m_round.push_back(key);
        }
        return item;
    }

    Ptr<const QueueDiscItem> DoPeek() override
    {
        return m_round.empty() ? nullptr : m_flows[m_round.front()].front();
    }

    bool CheckConfig() override
    {
        return GetNInternalQueues() == 0 && GetNQueueDiscClasses() == 0;
    }

    void InitializeParams() override
    {
    }

    std::unordered_map<uint32_t, std::deque<Ptr<QueueDiscItem>>> m_flows;
    std::deque<uint32_t> m_round;
};

NS_OBJECT_ENSURE_REGISTERED(RoundRobinQueueDisc);

// ---------------------------------------------------------------------------------------
// Two ns-3.37 TCP behaviours that Linux and the RFCs do differently, each one flag away
// (off by default: stock ns-3). docs/validation.md measures what each costs.
//
// --cwrFastRetransmit: ns-3's TcpSocketBase::DupAck counts duplicate ACKs in CA_CWR but
// moves to fast recovery only from CA_OPEN/CA_DISORDER, so a DCTCP sender that loses a
// segment within a window of its ECN cut waits for the RTO (ProcessAck's CWR branch: "TODO:
// need to check behavior if marking is compounded by loss"). Linux (tcp_fastretrans_alert:
// tcp_time_to_recover in any state below Recovery) and RFC 5681/6675 retransmit from CWR
// too. After ns-3 has counted the duplicate ACK, this socket enters recovery from CWR by
// ns-3's own rule for CA_DISORDER (the threshold, or with SACK the head deemed lost).
// ---------------------------------------------------------------------------------------
/// The TypeId of a subclass that changes behaviour only (no attributes, the parent's
/// constructors), registered once.
template <typename T, typename Parent>
TypeId
BehaviourTypeId(const char* name)
{
    static TypeId tid =
        TypeId(name).SetParent<Parent>().SetGroupName("Internet").template AddConstructor<T>();
    return tid;
}

class CwrFastRetransmitSocket : public TcpSocketBase
{
  public:
    static TypeId GetTypeId()
    {
        return BehaviourTypeId<CwrFastRetransmitSocket, TcpSocketBase>("ns3::CwrFastRetransmitSocket");
    }

  protected:
    Ptr<TcpSocketBase> Fork() override
    {
        return CopyObject<CwrFastRetransmitSocket>(this);
    }

    void ProcessAck(const SequenceNumber32& ackNumber,
                    bool scoreboardUpdated,
                    uint32_t currentDelivered,
                    const SequenceNumber32& oldHeadSequence) override
    {
        // ns-3's own definition of a duplicate ACK (ProcessAck, RFC 6675 with SACK)
        const bool dupack = m_sackEnabled ? scoreboardUpdated
                                          : ackNumber == oldHeadSequence &&
                                                ackNumber < m_tcb->m_highTxMark;
        TcpSocketBase::ProcessAck(ackNumber, scoreboardUpdated, currentDelivered, oldHeadSequence);
        if (!dupack || m_tcb->m_congState != TcpSocketState::CA_CWR)
        {
            return;
        }
        const bool threshold = m_dupAckCount >= m_retxThresh &&
                               (m_highRxAckMark >= m_recover || !m_recoverActive);
        const bool headLost =
            m_sackEnabled && m_txBuffer->IsLost(m_highRxAckMark + m_tcb->m_segmentSize);
        if (threshold || headLost)
        {
            g_cwrRecoveries++;
            EnterRecovery(currentDelivered);
        }
    }

  public:
    static uint64_t g_cwrRecoveries; // fast recoveries entered from CA_CWR (stderr summary)
};

uint64_t CwrFastRetransmitSocket::g_cwrRecoveries = 0;
NS_OBJECT_ENSURE_REGISTERED(CwrFastRetransmitSocket);

// --dctcpFloor: TcpDctcp::GetSsThresh is (1 - alpha/2) * cwnd with no lower bound, so with
// alpha near 1 a 2-segment window is cut to 1 and the receiver's delayed ACK (200 ms) then
// outlasts the 10 ms RTO. Linux's dctcp_ssthresh keeps at least 2 segments, as gradwire does.
class TcpDctcpFloor : public TcpDctcp
{
  public:
    static TypeId GetTypeId()
    {
        return BehaviourTypeId<TcpDctcpFloor, TcpDctcp>("ns3::TcpDctcpFloor");
    }

    std::string GetName() const override
    {
        return "TcpDctcpFloor";
    }

    uint32_t GetSsThresh(Ptr<const TcpSocketState> tcb, uint32_t bytesInFlight) override
    {
        return std::max(TcpDctcp::GetSsThresh(tcb, bytesInFlight), 2 * tcb->m_segmentSize);
    }

    Ptr<TcpCongestionOps> Fork() override
    {
        return CopyObject<TcpDctcpFloor>(this);
    }
};

NS_OBJECT_ENSURE_REGISTERED(TcpDctcpFloor);
} // namespace ns3

// ---------------------------------------------------------------------------------------
// Flows and the applications that drive them.
// ---------------------------------------------------------------------------------------
struct Flow
{
    uint32_t id;
    uint32_t src;
    uint32_t dst;
    uint64_t size;
    int32_t feeds{-1}; // barrier this flow's completion counts toward (ps: a push)
    int64_t startNs{-1};
    int64_t finishNs{-1};
    uint64_t sent{0};     // bytes handed to the socket
    uint64_t received{0}; // bytes read by the receiving application
    bool triggered{false};
    bool connected{false};
    uint32_t highTx{0}; // highest sequence number + 1 sent (relative to ISN)
    bool haveIsn{false};
    uint32_t isn{0};
    uint64_t retransmits{0};
    uint64_t timeouts{0};
    Ptr<Socket> sock;
};

static std::vector<Flow> g_flows;
static std::vector<Ptr<Node>> g_hosts;
static std::vector<Ipv4Address> g_hostAddr;
static std::map<std::pair<uint32_t, uint16_t>, uint32_t> g_flowByPeer; // (src ip, port) -> id
static std::map<Socket*, uint32_t> g_flowBySocket;                      // receiver socket -> id

static Time g_shift = Seconds(0); // preconnect: time reserved for the handshakes
// As gradwire prints them with `--features trace` (crates/gradwire-core/src/transport/tcp/trace.rs):
// LEAFSPINE_TRACE_STATES=1: `ST <t ns> <flow> <from> <to> <cwnd before>` for every congestion
// state change of every flow; LEAFSPINE_TRACE_DST=h: `TX <t ns> <flow> <seq> <1 if a resend>`
// for every data segment handed down for host h.
static bool g_traceStates = false;
static int64_t g_traceDst = -1;
static std::vector<uint32_t> g_cwnd; // per flow, the last congestion window traced

static uint32_t g_leaves = 0;

/// gradwire's name of node `id`: hosts, then leaves, then spines, as they are created.
static std::string
NodeName(uint32_t id)
{
    uint32_t hosts = g_hosts.size();
    if (id < hosts)
    {
        return "host" + std::to_string(id);
    }
    if (id < hosts + g_leaves)
    {
        return "leaf" + std::to_string(id - hosts);
    }
    return "spine" + std::to_string(id - hosts - g_leaves);
}

static void
TraceDrop(Ptr<QueueDiscItem> item, uint32_t from, uint32_t to)
{
    Ptr<Ipv4QueueDiscItem> ip = DynamicCast<Ipv4QueueDiscItem>(item);
    TcpHeader th;
    if (!ip || !item->GetPacket()->PeekHeader(th))
    {
        return;
    }
    uint32_t len = item->GetPacket()->GetSize() - th.GetSerializedSize();
    // data is keyed by its sender, an ACK by where it goes
    auto it = len > 0 ? g_flowByPeer.find({ip->GetHeader().GetSource().Get(), th.GetSourcePort()})
                      : g_flowByPeer.find({ip->GetHeader().GetDestination().Get(), th.GetDestinationPort()});
    if (it == g_flowByPeer.end())
    {
        return;
    }
    const Flow& f = g_flows[it->second];
    uint32_t seq = len > 0 ? th.GetSequenceNumber().GetValue() : th.GetAckNumber().GetValue();
    std::fprintf(stderr, "DROP %ld %u %s %u %s->%s\n", (Simulator::Now() - g_shift).GetNanoSeconds(), it->second,
                 len > 0 ? "Data" : "Ack", f.haveIsn ? seq - f.isn : seq, NodeName(from).c_str(), NodeName(to).c_str());
}
static uint64_t g_done = 0;
static const uint16_t kPort = 5000;

// Barriers (ps): released when every flow feeding them is done; start their flows.
struct Barrier
{
    uint32_t waitingFor{0};
    std::vector<uint32_t> releases;
};

static std::vector<Barrier> g_barriers;
static std::vector<uint64_t> g_uplinkTx; // packets sent by each leaf->spine port

static void
CountTx(uint64_t* counter, Ptr<const Packet>)
{
    ++*counter;
}
static bool g_preconnect = true;
static Time g_start = Seconds(0); // workload start (shift included)

static bool g_cwrFastRetransmit = false; // --cwrFastRetransmit
static int64_t g_traceFlow = -1; // LEAFSPINE_TRACE_FLOW=id: log that flow's sender
/// Retransmission timeouts (entries into CA_LOSS) by the congestion state they interrupted.
static uint64_t g_rtoFrom[TcpSocketState::CA_LAST_STATE] = {};

static int64_t
NowNs()
{
    return Simulator::Now().GetNanoSeconds();
}

static void
PumpSend(Flow& f)
{
    while (f.sent < f.size)
    {
        uint32_t avail = f.sock->GetTxAvailable();
        if (avail == 0)
        {
            return; // SetSendCallback resumes us
        }
        uint64_t chunk = std::min<uint64_t>({f.size - f.sent, avail, 1u << 26});
        int n = f.sock->Send(Create<Packet>(static_cast<uint32_t>(chunk)));
        if (n <= 0)
        {
            return;
        }
        f.sent += static_cast<uint64_t>(n);
    }
}

static void
StartSending(uint32_t id)
{
    Flow& f = g_flows[id];
    if (f.startNs < 0)
    {
        f.startNs = NowNs();
    }
    PumpSend(f);
}

static void
OnSendSpace(uint32_t id, Ptr<Socket>, uint32_t)
{
    Flow& f = g_flows[id];
    if (f.startNs >= 0)
    {
        PumpSend(f);
    }
}

static void
OnConnected(uint32_t id, Ptr<Socket>)
{
    Flow& f = g_flows[id];
    f.connected = true;
    if (f.triggered)
    {
        if (g_preconnect)
        {
            NS_LOG_WARN("flow " << id << " started before its connection was up; "
                                << "raise --preconnectUs");
        }
        StartSending(id);
    }
}

static void
OnConnectFailed(uint32_t id, Ptr<Socket>)
{
    NS_FATAL_ERROR("flow " << id << ": connection failed");
}

static void
OnTx(uint32_t id, Ptr<const Packet> p, const TcpHeader& h, Ptr<const TcpSocketBase>)
{
    Flow& f = g_flows[id];
    if (h.GetFlags() & TcpHeader::SYN)
    {
        f.isn = h.GetSequenceNumber().GetValue() + 1;
        f.haveIsn = true;
        return;
    }
    if (p->GetSize() == 0 || !f.haveIsn)
    {
        return;
    }
    uint32_t seq = h.GetSequenceNumber().GetValue() - f.isn;
    uint32_t end = seq + p->GetSize();
    if (g_traceDst >= 0 && f.dst == static_cast<uint32_t>(g_traceDst))
    {
        std::fprintf(stderr, "TX %ld %u %u %d\n", (Simulator::Now() - g_shift).GetNanoSeconds(), id, seq,
                     seq < f.highTx ? 1 : 0);
    }
    if (seq < f.highTx)
    {
        f.retransmits++;
        if (g_traceFlow == id)
        {
            std::fprintf(stderr, "%ld flow %u: retransmit seq %u\n", NowNs(), id, seq);
        }
    }
    if (end > f.highTx)
    {
        f.highTx = end;
    }
}

/// LEAFSPINE_TRACE_FLOW: the traced flow's window, threshold and the ACKs it receives
/// (times from the workload's start, sequence numbers from the flow's first byte).
static void
OnCwnd(uint32_t id, uint32_t old, uint32_t now)
{
    std::fprintf(stderr, "%ld flow %u: cwnd %u -> %u\n", (Simulator::Now() - g_shift).GetNanoSeconds(),
                 id, old, now);
}

static void
OnSsthresh(uint32_t id, uint32_t old, uint32_t now)
{
    std::fprintf(stderr, "%ld flow %u: ssthresh %u -> %u\n",
                 (Simulator::Now() - g_shift).GetNanoSeconds(), id, old, now);
}

static void
OnRxAck(uint32_t id, Ptr<const Packet>, const TcpHeader& h, Ptr<const TcpSocketBase>)
{
    Flow& f = g_flows[id];
    if (!f.haveIsn || !(h.GetFlags() & TcpHeader::ACK))
    {
        return;
    }
    std::fprintf(stderr, "%ld flow %u: ack %u%s\n", (Simulator::Now() - g_shift).GetNanoSeconds(),
                 id, h.GetAckNumber().GetValue() - f.isn,
                 (h.GetFlags() & TcpHeader::ECE) ? " ECE" : "");
}

static void
OnCwndAny(uint32_t id, uint32_t, uint32_t now)
{
    g_cwnd[id] = now;
}

static void
OnCongState(uint32_t id,
            TcpSocketState::TcpCongState_t old,
            TcpSocketState::TcpCongState_t now)
{
    if (g_traceFlow == id)
    {
        std::fprintf(stderr, "%ld flow %u: %s -> %s\n", NowNs(), id,
                     TcpSocketState::TcpCongStateName[old], TcpSocketState::TcpCongStateName[now]);
    }
    if (g_traceStates && old != now)
    {
        std::fprintf(stderr, "ST %ld %u %s %s %u\n", (Simulator::Now() - g_shift).GetNanoSeconds(), id,
                     TcpSocketState::TcpCongStateName[old], TcpSocketState::TcpCongStateName[now], g_cwnd[id]);
    }
    if (now == TcpSocketState::CA_LOSS)
    {
        g_flows[id].timeouts++;
        g_rtoFrom[old]++;
    }
}

/// LEAFSPINE_SAMPLE_PORT=from,to: print that switch port's queue every 200 ns up to 60 us.
static void
SamplePort(Ptr<StepEcnQueueDisc> q, Ptr<Queue<Packet>> dev, uint32_t from, uint32_t to)
{
    std::fprintf(stderr, "sample %ld node%u->node%u %u pkts (+%u in device)\n",
                 (Simulator::Now() - g_shift).GetNanoSeconds(), from, to,
                 q->GetNPackets(), dev->GetNPackets());
    if (Simulator::Now() - g_shift < MicroSeconds(60))
    {
        Simulator::Schedule(NanoSeconds(200), &SamplePort, q, dev, from, to);
    }
}

/// A flow's sending socket: ns-3's own, or with --cwrFastRetransmit the subclass above,
/// built as TcpL4Protocol::CreateSocket builds its sockets.
static Ptr<Socket>
CreateSenderSocket(Ptr<Node> node)
{
    if (!g_cwrFastRetransmit)
    {
        return Socket::CreateSocket(node, TcpSocketFactory::GetTypeId());
    }
    Ptr<TcpL4Protocol> tcp = node->GetObject<TcpL4Protocol>();
    TypeIdValue rtt;
    TypeIdValue cc;
    TypeIdValue recovery;
    tcp->GetAttribute("RttEstimatorType", rtt);
    tcp->GetAttribute("SocketType", cc);
    tcp->GetAttribute("RecoveryType", recovery);
    ObjectFactory factory;
    Ptr<CwrFastRetransmitSocket> s = CreateObject<CwrFastRetransmitSocket>();
    s->SetNode(node);
    s->SetTcp(tcp);
    factory.SetTypeId(rtt.Get());
    s->SetRtt(factory.Create<RttEstimator>());
    factory.SetTypeId(cc.Get());
    s->SetCongestionControlAlgorithm(factory.Create<TcpCongestionOps>());
    factory.SetTypeId(recovery.Get());
    s->SetRecoveryAlgorithm(factory.Create<TcpRecoveryOps>());
    tcp->AddSocket(s);
    return s;
}

static void
OpenConnection(uint32_t id)
{
    Flow& f = g_flows[id];
    Ptr<Socket> s = CreateSenderSocket(g_hosts[f.src]);
    f.sock = s;
    s->Bind();
    Address local;
    s->GetSockName(local);
    uint16_t port = InetSocketAddress::ConvertFrom(local).GetPort();
    g_flowByPeer[{g_hostAddr[f.src].Get(), port}] = id;
    s->TraceConnectWithoutContext("Tx", MakeBoundCallback(&OnTx, id));
    s->TraceConnectWithoutContext("CongState", MakeBoundCallback(&OnCongState, id));
    if (g_traceStates)
    {
        s->TraceConnectWithoutContext("CongestionWindow", MakeBoundCallback(&OnCwndAny, id));
    }
    if (g_traceFlow == id)
    {
        s->TraceConnectWithoutContext("CongestionWindow", MakeBoundCallback(&OnCwnd, id));
        s->TraceConnectWithoutContext("SlowStartThreshold", MakeBoundCallback(&OnSsthresh, id));
        s->TraceConnectWithoutContext("Rx", MakeBoundCallback(&OnRxAck, id));
    }
    s->SetConnectCallback(MakeBoundCallback(&OnConnected, id),
                          MakeBoundCallback(&OnConnectFailed, id));
    s->SetSendCallback(MakeBoundCallback(&OnSendSpace, id));
    s->Connect(InetSocketAddress(g_hostAddr[f.dst], kPort));
}

/// The flow may start now. With --handshake=inline its connection is opened now and data
/// flows once it is established; with preconnect the connection is (normally) already up.
static void
Trigger(uint32_t id)
{
    Flow& f = g_flows[id];
    f.triggered = true;
    if (!g_preconnect)
    {
        OpenConnection(id);
    }
    else if (f.connected)
    {
        StartSending(id);
    }
}

static void
OnFlowFinished(uint32_t id)
{
    Flow& f = g_flows[id];
    f.finishNs = NowNs();
    g_done++;
    if (f.feeds >= 0 && --g_barriers[f.feeds].waitingFor == 0)
    {
        for (uint32_t g : g_barriers[f.feeds].releases)
        {
            Simulator::Schedule(Max(g_start - Simulator::Now(), Seconds(0)), &Trigger, g);
        }
    }
    if (g_done == g_flows.size())
    {
        Simulator::Stop();
    }
}

static void
OnRecv(Ptr<Socket> s)
{
    auto it = g_flowBySocket.find(PeekPointer(s));
    NS_ABORT_MSG_IF(it == g_flowBySocket.end(), "data on an unknown connection");
    Flow& f = g_flows[it->second];
    Ptr<Packet> p;
    while ((p = s->Recv()))
    {
        f.received += p->GetSize();
    }
    if (f.finishNs < 0 && f.received >= f.size)
    {
        OnFlowFinished(f.id);
    }
}

static bool
OnConnectionRequest(Ptr<Socket>, const Address&)
{
    return true;
}

static void
OnAccept(Ptr<Socket> s, const Address& from)
{
    InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
    auto it = g_flowByPeer.find({a.GetIpv4().Get(), a.GetPort()});
    NS_ABORT_MSG_IF(it == g_flowByPeer.end(), "connection from an unknown flow");
    g_flowBySocket[PeekPointer(s)] = it->second;
    s->SetRecvCallback(MakeCallback(&OnRecv));
}

static std::vector<uint32_t>
ParseList(const std::string& s)
{
    std::vector<uint32_t> v;
    std::stringstream ss(s);
    std::string tok;
    while (std::getline(ss, tok, ','))
    {
        if (!tok.empty())
        {
            v.push_back(static_cast<uint32_t>(std::stoul(tok)));
        }
    }
    return v;
}

int
main(int argc, char* argv[])
{
    if (const char* t = getenv("LEAFSPINE_TRACE_FLOW"))
    {
        g_traceFlow = std::atol(t);
    }
    g_traceStates = getenv("LEAFSPINE_TRACE_STATES") != nullptr;
    g_traceDrops = getenv("LEAFSPINE_TRACE_DROPS") != nullptr;
    if (const char* t = getenv("LEAFSPINE_TRACE_DST"))
    {
        g_traceDst = std::atol(t);
    }
    CommandLine cmd(__FILE__);
    // Each option in one place: its variable, default and help (--help lists them in this
    // order).
#define OPTION(type, name, value, help) \
    type name = value;                  \
    cmd.AddValue(#name, help, name)
    // Topology
    OPTION(uint32_t, spines, 4, "number of spine switches");
    OPTION(uint32_t, leaves, 9, "number of leaf switches");
    OPTION(uint32_t, hostsPerLeaf, 16, "hosts under each leaf");
    OPTION(double, hostGbps, 100.0, "host link rate (Gb/s)");
    OPTION(uint32_t, uplinksPerLeaf, 4, "uplinks per leaf; uplink j goes to spine j % spines");
    OPTION(double, uplinkGbps, 100.0, "leaf-spine link rate (Gb/s)");
    OPTION(uint64_t, linkDelayNs, 10650, "propagation delay of every link (ns)");
    // Switch
    OPTION(uint64_t, bufferBytes, 512000, "switch egress buffer per port (bytes)");
    OPTION(uint32_t, ecnThresholdPackets, 65, "step ECN threshold K in packets (0 = no marking)");
    OPTION(std::string, aqm, "step",
           "switch queue: step (exact step marking) or red (RED approximation)");
    OPTION(std::string, hostQueue, "rr",
           "host NIC queue: rr (per-flow round-robin, one packet per turn, as gradwire's "
           "NIC) or fifo");
    OPTION(uint64_t, hostQueueBytes, 0,
           "fifo host NIC: drop-tail limit in bytes (0 = unbounded, gradwire's "
           "host.nic_queue_bytes)");
    // Transport
    OPTION(std::string, transport, "dctcp", "newreno or dctcp");
    OPTION(uint32_t, mss, 1460, "TCP MSS (bytes)");
    OPTION(uint32_t, initCwnd, 10, "initial congestion window (segments)");
    OPTION(double, rtoMinUs, 10000.0, "minimum RTO (us)");
    OPTION(double, rtoInitialUs, 10000.0, "RTO before the first RTT sample (us)");
    OPTION(bool, limitedTransmit, false, "RFC 3042 limited transmit");
    OPTION(bool, sack, false, "SACK (TcpSocketBase::Sack; ns-3's default is on)");
    OPTION(uint32_t, delAckCount, 1, "segments per delayed ACK (ns-3's default is 2)");
    OPTION(std::string, recovery, "classic", "classic (NewReno) or prr (ns-3's default)");
    OPTION(double, dctcpG, 1.0 / 16, "DCTCP EWMA gain g");
    OPTION(bool, cwrFastRetransmit, false,
           "fast-retransmit from CA_CWR on duplicate ACKs, as Linux and RFC 5681 do (stock "
           "ns-3.37 waits for the RTO there)");
    OPTION(bool, dctcpFloor, false,
           "DCTCP's cut keeps at least 2 segments, as Linux's dctcp_ssthresh (stock ns-3.37 "
           "has no floor)");
    OPTION(std::string, handshake, "preconnect",
           "preconnect: open every connection at t=0 and start all flows "
           "--preconnectUs later (times in the CSV are shifted back); inline: "
           "connect when the flow starts, FCT counted from connection establishment");
    OPTION(double, preconnectUs, 1000.0, "preconnect: simulated time reserved for handshakes (us)");
    // Routing
    OPTION(std::string, ecmp, "spray", "spray (per-packet random ECMP; the only kind ns-3.37 has)");
    // Workload
    OPTION(std::string, workload, "incast", "incast or ps");
    OPTION(uint32_t, receiver, 0, "incast: receiving host");
    OPTION(uint32_t, senders, 32, "incast: senders are receiver+1 .. receiver+N (mod hosts)");
    OPTION(std::string, senderList, "", "incast: explicit comma-separated sender hosts");
    OPTION(uint64_t, flowBytes, 1000000, "incast: bytes per sender");
    OPTION(uint32_t, workers, 144, "ps: number of workers");
    OPTION(uint32_t, servers, 36, "ps: number of parameter servers");
    OPTION(bool, colocated, true,
           "ps: server j runs on worker j*workers/servers's host (else on "
           "the hosts after the workers')");
    OPTION(uint64_t, pushBytes, 4000000, "ps: bytes each worker pushes (split over servers)");
    OPTION(uint64_t, pullBytes, 4000000, "ps: bytes each worker pulls (split over servers)");
    OPTION(double, startUs, 0.0, "workload start time (us)");
    OPTION(double, startJitterNs, 0.0,
           "each flow not gated by a barrier starts later by a seeded uniform draw in [0, this) ns");
    // Run
    OPTION(uint32_t, seed, 1, "RNG seed");
    OPTION(double, stopMs, 2000.0, "hard stop of simulated time (ms)");
    OPTION(std::string, out, "flows.csv", "output CSV path");
#undef OPTION
    cmd.Parse(argc, argv);

    NS_ABORT_MSG_IF(transport != "newreno" && transport != "dctcp",
                    "--transport must be newreno or dctcp");
    NS_ABORT_MSG_IF(ecmp != "spray",
                    "ns-3.37 global routing has no per-flow ECMP; use --ecmp=spray");
    NS_ABORT_MSG_IF(aqm != "step" && aqm != "red", "--aqm must be step or red");
    NS_ABORT_MSG_IF(hostQueue != "rr" && hostQueue != "fifo", "--hostQueue must be rr or fifo");
    NS_ABORT_MSG_IF(handshake != "preconnect" && handshake != "inline",
                    "--handshake must be preconnect or inline");
    g_preconnect = handshake == "preconnect";
    g_shift = g_preconnect ? MicroSeconds(preconnectUs) : Seconds(0);
    g_start = g_shift + MicroSeconds(startUs);
    const bool dctcp = transport == "dctcp";
    const uint32_t nHosts = leaves * hostsPerLeaf;

    RngSeedManager::SetSeed(seed);
    RngSeedManager::SetRun(1);

    // ----- TCP ------------------------------------------------------------------------
    Config::SetDefault("ns3::TcpL4Protocol::SocketType",
                       TypeIdValue(!dctcp      ? TcpNewReno::GetTypeId()
                                   : dctcpFloor ? TcpDctcpFloor::GetTypeId()
                                                : TcpDctcp::GetTypeId()));
    g_cwrFastRetransmit = cwrFastRetransmit;
    NS_ABORT_MSG_IF(recovery != "classic" && recovery != "prr", "--recovery must be classic or prr");
    Config::SetDefault("ns3::TcpL4Protocol::RecoveryType",
                       TypeIdValue(recovery == "prr" ? TcpPrrRecovery::GetTypeId()
                                                     : TcpClassicRecovery::GetTypeId()));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(mss));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(initCwnd));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(delAckCount));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(1u << 30));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(1u << 30));
    Config::SetDefault("ns3::TcpSocket::ConnTimeout", TimeValue(MicroSeconds(rtoInitialUs)));
    Config::SetDefault("ns3::TcpSocket::ConnCount", UintegerValue(1000));
    Config::SetDefault("ns3::TcpSocket::DataRetries", UintegerValue(1000));
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(sack));
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(false));
    Config::SetDefault("ns3::TcpSocketBase::WindowScaling", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MicroSeconds(rtoMinUs)));
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(NanoSeconds(1)));
    Config::SetDefault("ns3::TcpSocketBase::ReTxThreshold", UintegerValue(3));
    Config::SetDefault("ns3::TcpSocketBase::LimitedTransmit", BooleanValue(limitedTransmit));
    Config::SetDefault("ns3::RttEstimator::InitialEstimation",
                       TimeValue(MicroSeconds(rtoInitialUs)));
    if (dctcp)
    {
        // TcpDctcp turns ECN on for its sockets itself; g = 1/16, alpha starts at 1.
        Config::SetDefault("ns3::TcpDctcp::DctcpShiftG", DoubleValue(dctcpG));
    }

    // ----- Topology ---------------------------------------------------------------------
    // Per-packet random choice among equal-cost next hops. Must be set before the stack is
    // installed: each node's Ipv4GlobalRouting reads it when it is created.
    Config::SetDefault("ns3::Ipv4GlobalRouting::RandomEcmpRouting", BooleanValue(true));
    NodeContainer hosts, leafSw, spineSw;
    hosts.Create(nHosts);
    leafSw.Create(leaves);
    g_leaves = leaves;
    spineSw.Create(spines);
    InternetStackHelper stack;
    stack.Install(hosts);
    stack.Install(leafSw);
    stack.Install(spineSw);

    // Switch ports: the queue disc is where packets wait; the device queue holds 1 packet.
    TrafficControlHelper switchTc;
    if (aqm == "step")
    {
        switchTc.SetRootQueueDisc(
            "ns3::StepEcnQueueDisc",
            "MaxSize", QueueSizeValue(QueueSize(QueueSizeUnit::BYTES, bufferBytes)),
            "MarkThreshold", UintegerValue(dctcp ? ecnThresholdPackets : 0));
    }
    else
    {
        // RED approximation of step marking: thresholds in bytes (MaxSize is in bytes),
        // instantaneous queue (QW = 1), no gentle region, mark instead of drop.
        double th = static_cast<double>(ecnThresholdPackets) * (mss + 40);
        bool mark = dctcp && ecnThresholdPackets > 0;
        switchTc.SetRootQueueDisc(
            "ns3::RedQueueDisc",
            "MaxSize", QueueSizeValue(QueueSize(QueueSizeUnit::BYTES, bufferBytes)),
            "MeanPktSize", UintegerValue(mss + 40),
            "MinTh", DoubleValue(mark ? th : 1e12),
            "MaxTh", DoubleValue(mark ? th : 1e12),
            "QW", DoubleValue(1.0),
            "Gentle", BooleanValue(false),
            "UseEcn", BooleanValue(mark),
            "UseHardDrop", BooleanValue(false));
    }
    // Host NICs: per-flow round-robin (gradwire's default NIC, unbounded) or one FIFO
    // (gradwire's host.nic = "fifo"; unbounded unless --hostQueueBytes).
    TrafficControlHelper hostTc;
    if (hostQueue == "rr")
    {
        hostTc.SetRootQueueDisc("ns3::RoundRobinQueueDisc");
    }
    else
    {
        hostTc.SetRootQueueDisc("ns3::FifoQueueDisc",
                                "MaxSize",
                                hostQueueBytes
                                    ? QueueSizeValue(QueueSize(QueueSizeUnit::BYTES, hostQueueBytes))
                                    : QueueSizeValue(QueueSize("10000000p")));
    }

    PointToPointHelper hostLink;
    hostLink.SetDeviceAttribute("DataRate", DataRateValue(DataRate(hostGbps * 1e9)));
    hostLink.SetChannelAttribute("Delay", TimeValue(NanoSeconds(linkDelayNs)));
    hostLink.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue("1p"));
    PointToPointHelper upLink;
    upLink.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uplinkGbps * 1e9)));
    upLink.SetChannelAttribute("Delay", TimeValue(NanoSeconds(linkDelayNs)));
    upLink.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue("1p"));

    if (aqm == "red")
    {
        Config::SetDefault("ns3::RedQueueDisc::LinkBandwidth",
                           DataRateValue(DataRate(hostGbps * 1e9)));
        Config::SetDefault("ns3::RedQueueDisc::LinkDelay", TimeValue(NanoSeconds(linkDelayNs)));
    }

    auto installSwitchPort = [&switchTc](Ptr<NetDevice> dev) {
        QueueDiscContainer qd = switchTc.Install(dev);
        if (auto step = DynamicCast<StepEcnQueueDisc>(qd.Get(0)))
        {
            step->SetDeviceQueue(DynamicCast<PointToPointNetDevice>(dev)->GetQueue());
            Ptr<Channel> ch = dev->GetChannel();
            Ptr<Node> peer = ch->GetDevice(0) == dev ? ch->GetDevice(1)->GetNode() : ch->GetDevice(0)->GetNode();
            step->SetEnds(dev->GetNode()->GetId(), peer->GetId());
        }
    };

    Ipv4AddressHelper addr;
    addr.SetBase("10.0.0.0", "255.255.255.252");
    g_hostAddr.resize(nHosts);
    for (uint32_t h = 0; h < nHosts; ++h)
    {
        uint32_t l = h / hostsPerLeaf;
        NetDeviceContainer d = hostLink.Install(hosts.Get(h), leafSw.Get(l));
        // Install our queue discs before addresses are assigned (Ipv4AddressHelper would
        // otherwise install its default fq_codel).
        hostTc.Install(d.Get(0));
        installSwitchPort(d.Get(1));
        Ipv4InterfaceContainer ifc = addr.Assign(d);
        addr.NewNetwork();
        g_hostAddr[h] = ifc.GetAddress(0);
    }
    std::vector<Ptr<NetDevice>> uplinkDevs;
    for (uint32_t l = 0; l < leaves; ++l)
    {
        for (uint32_t j = 0; j < uplinksPerLeaf; ++j)
        {
            NetDeviceContainer d = upLink.Install(leafSw.Get(l), spineSw.Get(j % spines));
            installSwitchPort(d.Get(0));
            installSwitchPort(d.Get(1));
            uplinkDevs.push_back(d.Get(0));
            addr.Assign(d);
            addr.NewNetwork();
        }
    }
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();

    for (uint32_t h = 0; h < nHosts; ++h)
    {
        g_hosts.push_back(hosts.Get(h));
        Ptr<Socket> listener = Socket::CreateSocket(hosts.Get(h), TcpSocketFactory::GetTypeId());
        listener->Bind(InetSocketAddress(Ipv4Address::GetAny(), kPort));
        listener->Listen();
        listener->SetAcceptCallback(MakeCallback(&OnConnectionRequest), MakeCallback(&OnAccept));
    }

    // ----- Workload (same flows, in the same order, as gradwire's workload.rs) --------
    auto addFlow = [](uint32_t src, uint32_t dst, uint64_t size) {
        Flow f;
        f.id = g_flows.size();
        f.src = src;
        f.dst = dst;
        f.size = size;
        g_flows.push_back(f);
        return f.id;
    };
    std::vector<bool> gated;
    if (workload == "incast")
    {
        std::vector<uint32_t> src = ParseList(senderList);
        if (src.empty())
        {
            for (uint32_t k = 1; k <= senders; ++k)
            {
                src.push_back((receiver + k) % nHosts);
            }
        }
        for (uint32_t s : src)
        {
            NS_ABORT_MSG_IF(s >= nHosts || s == receiver, "bad incast sender " << s);
            addFlow(s, receiver, flowBytes);
        }
    }
    else if (workload == "ps")
    {
        NS_ABORT_MSG_IF(servers == 0 || workers == 0, "need workers and servers");
        // worker i sits in rack i % leaves, slot i / leaves
        auto rr = [&](uint32_t i) { return (i % leaves) * hostsPerLeaf + i / leaves; };
        NS_ABORT_MSG_IF(workers + (colocated ? 0 : servers) > nHosts, "not enough hosts");
        std::vector<uint32_t> serverHost(servers);
        for (uint32_t j = 0; j < servers; ++j)
        {
            serverHost[j] = colocated ? rr(static_cast<uint32_t>(uint64_t(j) * workers / servers))
                                      : rr(workers + j);
        }
        // server j gets total / servers bytes, the first (total % servers) servers one more
        auto share = [&](uint64_t total, uint32_t j) {
            return total / servers + (j < total % servers ? 1 : 0);
        };
        for (uint32_t j = 0; j < servers; ++j)
        {
            Barrier b;
            uint32_t bid = g_barriers.size();
            for (uint32_t i = 0; i < workers; ++i)
            {
                if (rr(i) != serverHost[j])
                {
                    uint32_t id = addFlow(rr(i), serverHost[j], share(pushBytes, j));
                    g_flows[id].feeds = bid;
                    b.waitingFor++;
                }
            }
            for (uint32_t i = 0; i < workers; ++i)
            {
                if (rr(i) != serverHost[j] && share(pullBytes, j) > 0)
                {
                    b.releases.push_back(addFlow(serverHost[j], rr(i), share(pullBytes, j)));
                }
            }
            g_barriers.push_back(b);
        }
    }
    else
    {
        NS_FATAL_ERROR("--workload must be incast or ps");
    }
    gated.assign(g_flows.size(), false);
    g_cwnd.assign(g_flows.size(), 0);
    for (const Barrier& b : g_barriers)
    {
        for (uint32_t g : b.releases)
        {
            gated[g] = b.waitingFor > 0;
        }
    }
    // Made only when asked for, so a run without jitter draws the streams it always drew.
    Ptr<UniformRandomVariable> jitter;
    if (startJitterNs > 0)
    {
        jitter = CreateObject<UniformRandomVariable>();
        jitter->SetAttribute("Min", DoubleValue(0));
        jitter->SetAttribute("Max", DoubleValue(startJitterNs));
    }
    for (const Flow& f : g_flows)
    {
        if (g_preconnect)
        {
            Simulator::Schedule(Seconds(0), &OpenConnection, f.id);
        }
        if (!gated[f.id])
        {
            Time delay = jitter ? NanoSeconds(static_cast<int64_t>(jitter->GetValue())) : Seconds(0);
            Simulator::Schedule(g_start + delay, &Trigger, f.id);
        }
    }

    g_uplinkTx.assign(uplinkDevs.size(), 0);
    for (size_t u = 0; u < uplinkDevs.size(); ++u)
    {
        uplinkDevs[u]->TraceConnectWithoutContext("PhyTxBegin",
                                                  MakeBoundCallback(&CountTx, &g_uplinkTx[u]));
    }

    if (const char* sp = getenv("LEAFSPINE_SAMPLE_PORT"))
    {
        std::vector<uint32_t> ft = ParseList(sp);
        Ptr<Node> node = NodeList::GetNode(ft.at(0));
        for (uint32_t d = 0; d < node->GetNDevices(); ++d)
        {
            Ptr<Channel> ch = node->GetDevice(d)->GetChannel();
            if (!ch)
            {
                continue;
            }
            Ptr<Node> peer = ch->GetDevice(0)->GetNode() == node ? ch->GetDevice(1)->GetNode()
                                                                 : ch->GetDevice(0)->GetNode();
            if (peer->GetId() == ft.at(1))
            {
                auto q = DynamicCast<StepEcnQueueDisc>(
                    node->GetObject<TrafficControlLayer>()->GetRootQueueDiscOnDevice(
                        node->GetDevice(d)));
                auto dev = DynamicCast<PointToPointNetDevice>(node->GetDevice(d))->GetQueue();
                Simulator::Schedule(g_start, &SamplePort, q, dev, ft[0], ft[1]);
            }
        }
    }
    Simulator::Stop(g_shift + MilliSeconds(stopMs));
    Simulator::Run();

    // Switch-side counters, for the log (not part of the CSV).
    uint64_t drops = 0, marks = 0, ackMarks = 0;
    uint32_t peak = 0;
    for (NodeContainer* sw : {&leafSw, &spineSw})
    {
        for (uint32_t n = 0; n < sw->GetN(); ++n)
        {
            Ptr<Node> node = sw->Get(n);
            Ptr<TrafficControlLayer> tc = node->GetObject<TrafficControlLayer>();
            for (uint32_t d = 0; d < node->GetNDevices(); ++d)
            {
                Ptr<QueueDisc> q = tc->GetRootQueueDiscOnDevice(node->GetDevice(d));
                if (!q)
                {
                    continue;
                }
                const QueueDisc::Stats& st = q->GetStats();
                drops += st.nTotalDroppedPackets;
                marks += st.nTotalMarkedPackets;
                if (auto step = DynamicCast<StepEcnQueueDisc>(q))
                {
                    peak = std::max(peak, step->m_peakBytes);
                    ackMarks += step->m_ackMarks;
                    if (getenv("LEAFSPINE_PORTS") && (st.nTotalDroppedPackets || step->m_peakBytes))
                    {
                        Ptr<Channel> ch = node->GetDevice(d)->GetChannel();
                        Ptr<Node> peer = ch->GetDevice(0)->GetNode() == node
                                             ? ch->GetDevice(1)->GetNode()
                                             : ch->GetDevice(0)->GetNode();
                        std::fprintf(stderr, "port node%u->node%u: drops %u marks %u peak %u B\n",
                                     node->GetId(), peer->GetId(), st.nTotalDroppedPackets,
                                     st.nTotalMarkedPackets, step->m_peakBytes);
                    }
                }
            }
        }
    }

    std::ofstream os(out);
    NS_ABORT_MSG_IF(!os, "cannot write " << out);
    os << "flow_id,src,dst,size_bytes,start_ns,finish_ns,fct_ns,retransmits,timeouts\n";
    uint64_t unfinished = 0;
    for (const auto& f : g_flows)
    {
        os << f.id << ',' << f.src << ',' << f.dst << ',' << f.size << ',';
        const int64_t shift = g_shift.GetNanoSeconds();
        if (f.startNs >= 0)
        {
            os << f.startNs - shift;
        }
        os << ',';
        if (f.finishNs >= 0)
        {
            os << f.finishNs - shift << ',' << (f.finishNs - f.startNs);
        }
        else
        {
            os << ',';
            unfinished++;
        }
        os << ',' << f.retransmits << ',' << f.timeouts << '\n';
    }
    os.close();
    std::fprintf(stderr,
                 "leafspine: %zu flows, %lu unfinished, simulated %.3f ms, switch drops %lu, "
                 "CE marks %lu (%lu on pure ACKs), peak port queue %u B -> %s\n",
                 g_flows.size(),
                 static_cast<unsigned long>(unfinished),
                 (Simulator::Now() - g_shift).GetSeconds() * 1e3,
                 static_cast<unsigned long>(drops),
                 static_cast<unsigned long>(marks),
                 static_cast<unsigned long>(ackMarks),
                 peak,
                 out.c_str());
    std::fprintf(stderr, "leafspine: RTOs by interrupted state:");
    for (int st = 0; st < TcpSocketState::CA_LAST_STATE; ++st)
    {
        std::fprintf(stderr, " %s %lu", TcpSocketState::TcpCongStateName[st],
                     static_cast<unsigned long>(g_rtoFrom[st]));
    }
    std::fprintf(stderr, "\n");
    if (g_cwrFastRetransmit)
    {
        std::fprintf(stderr, "fast recoveries entered from CA_CWR: %lu\n",
                     static_cast<unsigned long>(CwrFastRetransmitSocket::g_cwrRecoveries));
    }
    if (getenv("LEAFSPINE_UPLINKS"))
    {
        for (size_t u = 0; u < g_uplinkTx.size(); ++u)
        {
            std::fprintf(stderr, "leaf%zu uplink%zu: %lu packets\n", u / uplinksPerLeaf,
                         u % uplinksPerLeaf, static_cast<unsigned long>(g_uplinkTx[u]));
        }
    }
    Simulator::Destroy();
    return unfinished == 0 ? 0 : 3;
}
